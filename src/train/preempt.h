// Preemption (docs/PARALLELISM.md, "Preemption and asynchronous checkpoints"):
// with train.checkpoint_dir set, SIGTERM (what a scheduler sends the ranks)
// and SIGUSR1 (what `mpirun` forwards to every rank) only set a flag; the
// training loop reads the flags into the step's reductions (train_step.h
// StepVotes), so that every rank stops after the same step, saves it and
// exits 0.
#pragma once

namespace mt {

// Installs the flag-setting handlers for SIGTERM and SIGUSR1 (replacing the
// default, which ends the process). Idempotent. main() calls it first, so that a
// signal during start-up (loading the config, MPI, the checks, building the
// model) is kept for the first step rather than killing the job.
void install_stop_handlers();
// For a process that will not stop cleanly (another subcommand, or a run
// without train.checkpoint_dir): restores both signals' default effect, and
// when one of them came since install_stop_handlers, raises it again, so the
// process ends as it would have without the handlers.
void release_stop_handlers();

// Whether this process has received the signal since install_stop_handlers.
bool got_sigterm();
bool got_sigusr1();

}  // namespace mt
