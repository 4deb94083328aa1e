#include "train/checkpoint_async.h"

#include "core/timer.h"

namespace mt {

CheckpointSaver::CheckpointSaver(const Config& cfg, const RunMesh& mesh) : cfg_(cfg), mesh_(mesh) {}

CheckpointSaver::~CheckpointSaver() {
  abandon();
}

void CheckpointSaver::abandon() {
  if (writer_.joinable()) writer_.join();
  snap_.reset();
}

int64_t CheckpointSaver::writer_done() const {
  return snap_ != nullptr && written_.load(std::memory_order_acquire) ? 1 : 0;
}

void CheckpointSaver::save(int64_t step, const TrainModel& model, MetricsWriter& metrics) {
  finish(metrics);
  const TrainConfig& tc = cfg_.train;
  Timer blocked;
  snap_ = std::make_unique<CheckpointSnapshot>(snapshot_checkpoint(
      tc.checkpoint_dir, step, model, mesh_, cfg_, metrics.lines(), tc.keep_checkpoints, std::move(spare_)));
  current_ = {step, 0.0, 0.0};
  written_.store(false, std::memory_order_relaxed);
  auto write = [this] {
    Timer t;
    write_checkpoint_files(*snap_, mesh_.rank);
    write_s_ = t.seconds();
    written_.store(true, std::memory_order_release);
  };
  if (tc.async_checkpoint) {
    writer_ = std::thread(write);  // no MPI on this thread (MPI_THREAD_FUNNELED)
    current_.blocked_s = blocked.seconds();
    return;
  }
  write();
  current_.blocked_s = blocked.seconds();
  finish(metrics);
}

void CheckpointSaver::finish(MetricsWriter& metrics) {
  if (snap_ == nullptr) return;
  Timer blocked;
  if (writer_.joinable()) writer_.join();  // returns at once when every rank voted writer_done
  current_.write_s = write_s_;
  std::unique_ptr<CheckpointSnapshot> snap = std::move(snap_);
  finalize_checkpoint(*snap, mesh_);  // throws from every rank when one could not write
  // Async saves keep the buffers (the memory a save in flight needs anyway);
  // synchronous ones free them until the next save.
  if (cfg_.train.async_checkpoint) spare_ = std::move(snap->boxes);
  current_.blocked_s += blocked.seconds();
  timings_.push_back(current_);
  metrics.write(
      {{"checkpoint_step", current_.step}, {"blocked_s", current_.blocked_s}, {"write_s", current_.write_s}});
}

}  // namespace mt
