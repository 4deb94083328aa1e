// Preemption (docs/PARALLELISM.md, "Preemption and asynchronous checkpoints"):
// with train.checkpoint_dir set, SIGTERM (what a scheduler sends the ranks)
// and SIGUSR1 (what `mpirun` forwards to every rank) only set a flag; the
// training loop reads the flags into the step's reductions (train_step.h
// StepVotes), so that every rank stops after the same step, saves it and
// exits 0.
#pragma once

namespace mt {

// Installs the flag-setting handlers for SIGTERM and SIGUSR1 (replacing the
// default, which ends the process). Idempotent.
void install_stop_handlers();

// Whether this process has received the signal since install_stop_handlers.
bool got_sigterm();
bool got_sigusr1();

}  // namespace mt
