// Checkpoints from the training loop (docs/PARALLELISM.md, "Preemption and
// asynchronous checkpoints"): each save is snapshot, write and finalize
// (ckpt/checkpoint.h). Synchronously the three run in a row. With
// train.async_checkpoint the write runs on a background thread while training
// goes on; the save is finalized at the first step after which every rank's
// writer has finished (StepVotes::writer_done, summed in the step's own
// reductions, so that all ranks finalize after the same step), or when the
// next save, the end of the run or a preemption needs it. At most one save is
// in flight.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/save_log.h"
#include "config/config.h"
#include "train/run_mesh.h"
#include "train/train_model.h"

namespace mt {

// What one save cost: the time training was blocked by it (snapshot,
// finalize and any wait for the write) and the write's own time, on this rank.
struct SaveTiming {
  int64_t step = 0;
  double blocked_s = 0, write_s = 0;
};

// Fault injection (MESHTRAIN_FAULT kind slow_copy): from now on, an async
// save's writer sleeps `seconds` before it copies the state, so that a test
// can see the optimizer wait for the copy (CheckpointSaver::wait_for_copy).
void set_snapshot_copy_delay(double seconds);

class CheckpointSaver {
 public:
  CheckpointSaver(const Config& cfg, const RunMesh& mesh);
  // Joins a write still running; what it wrote is not committed (an error
  // ends the run: leftover step-N.tmp-* folders are removed by the next commit).
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Saves the state after `step` optimizer steps: first finalizes a save in
  // flight; then the snapshot, and the write and finalize now (synchronous)
  // or the write on the background thread (async). Collective over the world.
  void save(int64_t step, const TrainModel& model, SaveLog& metrics);
  // This rank's vote for StepVotes::writer_done: a save is in flight and its
  // write has finished (successfully or not).
  int64_t writer_done() const;
  bool in_flight() const { return snap_ != nullptr; }
  // Async: waits until the save in flight has copied the state it saves (the
  // writer copies first, then writes); TrainModel::before_update calls it, so
  // that the copy overlaps the next step's forward and backward. The wait
  // counts as blocked time.
  void wait_for_copy();
  // Waits for the write in flight, if any, and finalizes it: on rank 0 a
  // metrics line {"checkpoint_step", "blocked_s", "write_s"}; an IoError from
  // every rank when any rank's write failed. Collective over the world.
  void finish(SaveLog& metrics);
  // Joins the writer without committing (an error that not every rank shares).
  void abandon();
  const std::vector<SaveTiming>& timings() const { return timings_; }

 private:
  const Config& cfg_;
  const RunMesh& mesh_;
  std::unique_ptr<CheckpointSnapshot> snap_;  // the save in flight (null: none)
  std::thread writer_;
  std::atomic<bool> written_{false};
  std::mutex copy_mutex_;
  std::condition_variable copy_done_;
  bool copied_ = true;  // under copy_mutex_
  double write_s_ = 0;  // set by the writer before written_
  SaveTiming current_;
  std::vector<SaveTiming> timings_;
  std::vector<StagingBuffer> spare_;  // async: the last snapshot's buffers, for the next
};

}  // namespace mt
