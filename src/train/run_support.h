// Small pieces of the training loop's plumbing: the per-step metrics file, the
// fault injection of the failure tests, the end-of-run finiteness check and the
// wait for another rank's long local work.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/save_log.h"

namespace mt {

class Group;
class Llama;

// One JSON object per line; no file when the path is empty. IoError naming the
// path when it cannot be opened. The lines written so far are also kept, for
// the checkpoints (ckpt/checkpoint.h, through SaveLog), which store them so
// that a resumed run's metrics file holds every step.
class MetricsWriter : public SaveLog {
 public:
  explicit MetricsWriter(const std::string& path);
  void write(const nlohmann::json& j) override;
  // Writes one line as it is (a stored line of the run being resumed).
  void write_line(const std::string& line);
  const std::vector<std::string>& lines() const override { return lines_; }

 private:
  std::ofstream out_;
  std::vector<std::string> lines_;
};

// Fault injection for the failure tests, MESHTRAIN_FAULT=KIND:RANK:STEP[:ARG]
// (the grammar and the kinds: docs/PARALLELISM.md, "Failures"). At the start of
// step STEP, world rank RANK
//   throw     throws one of meshtrain's errors;
//   bad_alloc throws std::bad_alloc (an error that is not one of ours);
//   stall     sleeps for an hour (the watchdog of the other ranks must end the job);
//   sigterm   raises SIGTERM in itself (a preemption that reaches one rank first);
//   sigkill   raises SIGKILL in itself (a lost process: the others' lifelines report it);
//   enospc    from then on, file writes fail with ENOSPC after ARG more bytes;
//   slow_io   from then on, each file commit first sleeps ARG seconds;
//   slow_copy from then on, an async save's copy of the state first sleeps ARG seconds;
//   kill_save from then on, SIGKILLs itself when it first reaches the kill
//             point ARG of a checkpoint save (core/fault_point.h);
//   kill_bytes from then on, SIGKILLs itself once ARG more bytes of files
//             (its checkpoint shard first) have been written;
//   skip_reduce the first forward reduction of linear site ARG ("layer 1
//             attn o") from then on keeps this rank's partial sum
//             (core/fault_point.h): a wrong result for --fingerprint to find.
struct Fault {
  std::string kind;  // empty: no fault
  int rank = -1;
  int64_t step = -1;
  double arg = 0;     // enospc, kill_bytes: bytes; slow_io, slow_copy: seconds
  std::string point;  // kill_save: one of kKillPoints; skip_reduce: the site
};

// Parses one MESHTRAIN_FAULT value; ConfigError naming the value and the
// accepted grammar for an unknown kind, a missing or extra field, or junk.
Fault parse_fault(const std::string& text);
// The fault MESHTRAIN_FAULT asks for (none when unset); ConfigError when malformed.
Fault read_fault();
// ConfigError naming the value when `f` can never fire in this run: its RANK
// is not a rank of the world (world_size ranks), or it is kill_save and the run
// writes no checkpoints (checkpoint_dir empty).
void check_fault_fires(const Fault& f, int world_size, const std::string& checkpoint_dir);
// Fires the fault when (rank, step) is its.
void inject_fault(const Fault& f, int rank, int64_t step);

}  // namespace mt

namespace mt {

// The end-of-run check, before anything is saved: every rank counts its
// non-finite parameters (its shard of each of `chunks`), the counts are summed
// over `world` (collective; null: one process), and when any parameter or the
// last validation loss in `val_losses` ((step, loss), may be empty) is not
// finite, the lead rank throws Error saying so and that nothing was saved.
// Only the lead throws, so that the job ends with one message (abort_job ends
// the other ranks, which wait in the save's or the report's collectives).
void require_finite_result(const std::vector<Llama*>& chunks,
                           const std::vector<std::pair<int64_t, double>>& val_losses, const Group* world,
                           bool lead);

}  // namespace mt

namespace mt {

// Long local work of one rank that the others then wait for (the lead's save
// of the model, its write of a trace): every rank calls this after it, and the
// wait runs under the watchdog limit `io_timeout_s` (parallel.io_timeout_s)
// instead of the collectives' parallel.timeout_s, so that a slow disk is not
// taken for a hung peer. Collective over `world` (null: one process, no-op).
void wait_for_local_work(const Group* world, double io_timeout_s, const char* what);

}  // namespace mt
