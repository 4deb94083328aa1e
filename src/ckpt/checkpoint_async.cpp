#include "ckpt/checkpoint_async.h"

#include <chrono>

#include "core/timer.h"
#include "core/trace_spans.h"

namespace mt {

namespace {
std::atomic<double> g_copy_delay_s{0};
}  // namespace

void set_snapshot_copy_delay(double seconds) {
  g_copy_delay_s.store(seconds, std::memory_order_relaxed);
}

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

void CheckpointSaver::save(int64_t step, const TrainModel& model, SaveLog& metrics) {
  finish(metrics);
  const TrainConfig& tc = cfg_.train;
  Timer blocked;
  // Async: the writer copies the state, during the next step's forward and
  // backward, which only read it; the optimizer waits for the copy (wait_for_copy).
  snap_ = std::make_unique<CheckpointSnapshot>(snapshot_checkpoint(tc.checkpoint_dir, step, model, mesh_,
                                                                   cfg_, metrics.lines(), tc.keep_checkpoints,
                                                                   std::move(spare_), tc.async_checkpoint));
  current_ = {step, 0.0, 0.0};
  written_.store(false, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(copy_mutex_);
    copied_ = snap_->copies.empty();
  }
  auto write = [this] {
    const TraceScope span("checkpoint", "checkpoint write");  // --trace: on the writer's own track
    Timer t;
    if (!snap_->copies.empty()) {
      const double delay = g_copy_delay_s.load(std::memory_order_relaxed);
      if (delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
      copy_boxes(*snap_, false);  // one thread: the others train
      std::lock_guard<std::mutex> lock(copy_mutex_);
      copied_ = true;
      copy_done_.notify_all();
    }
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

void CheckpointSaver::wait_for_copy() {
  Timer blocked;
  std::unique_lock<std::mutex> lock(copy_mutex_);
  if (copied_) return;
  copy_done_.wait(lock, [this] { return copied_; });
  current_.blocked_s += blocked.seconds();
}

void CheckpointSaver::finish(SaveLog& metrics) {
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
