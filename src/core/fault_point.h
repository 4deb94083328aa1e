// Kill points: where the crash tests end this process in the middle of writing
// a checkpoint (MESHTRAIN_FAULT kinds kill_save and kill_bytes, armed by
// train/run_support.h; docs/PARALLELISM.md, "Failures"). Each point is a
// one-line call at the place it names; the kill is SIGKILL, which nothing can
// catch or tidy up after, so what is left on disk is what a power cut or the
// kernel's OOM killer would leave there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mt {

// The points, in the order one rank's checkpoint save reaches them
// (docs/FORMATS.md, "Training checkpoints"): around the fsync of its first
// file (its shard), after that file is complete, around the fsync of the
// checkpoint folder, before the folder's rename, around the replacement of
// `latest`, and before pruning. The last five are rank 0's.
inline constexpr const char* kKillPoints[] = {"file_fsync_before", "file_fsync_after", "shard_written",
                                              "dir_fsync_before",  "dir_fsync_after",  "rename_before",
                                              "latest_before",     "latest_after",     "prune_before"};

// Whether `name` is one of kKillPoints.
bool is_kill_point(std::string_view name);
// kKillPoints as one comma-separated line, for messages.
std::string kill_point_list();

// From now on, the first time this process reaches `point` (one of
// kKillPoints), it dies.
void arm_kill_point(std::string_view point);
// From now on, this process dies as soon as `bytes` more bytes have been
// written through AtomicFile (core/file.h): a file cut at that byte.
void arm_kill_after_bytes(int64_t bytes);

// Dies here when `point` is armed; otherwise nothing. `point` must be one of
// kKillPoints (an internal error otherwise, armed or not, so a misspelt
// point fails every run rather than never firing).
void kill_point(const char* point);

// For AtomicFile::write under kill_bytes: how many of the `bytes` bytes about
// to be written may go out before the kill (all of them when none is armed),
// charged to the armed budget. After writing them, call kill_if_bytes_spent.
size_t bytes_before_kill(size_t bytes);
// Dies when an armed kill_bytes budget is spent.
void kill_if_bytes_spent();

// A wrong result rather than a crash, for --fingerprint's test (MESHTRAIN_FAULT
// kind skip_reduce): from now on, the first reduction of the linear plan's
// site `site` ("layer 1 attn o") that reaches skipped_reduction is undone on
// this process, which keeps its own partial sum as if the collective had not
// run (the collective itself still runs, so no peer waits).
void arm_skipped_reduction(std::string_view site);
// Whether the reduction at `site` is the armed one (true once, then disarmed).
bool skipped_reduction(std::string_view site);

}  // namespace mt
