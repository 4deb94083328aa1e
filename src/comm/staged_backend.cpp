#include "comm/staged_backend.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "comm/buffer_pool.h"
#include "core/device.h"
#include "core/error.h"

namespace mt {

namespace {

struct Counters {
  std::mutex mu;
  std::map<std::string, StagedBytes> by_op;
};

Counters& counters() {
  static Counters c;
  return c;
}

void count_copy(const char* op, bool out, int64_t bytes) {
  auto& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  StagedBytes& n = c.by_op[op];
  (out ? n.out_copies : n.back_copies) += 1;
  (out ? n.out_bytes : n.back_bytes) += bytes;
}

struct Run {
  int64_t begin = 0, end = 0;  // bytes [begin, end) of a buffer
};
using Runs = std::vector<Run>;

Runs whole(int64_t bytes) {
  return bytes > 0 ? Runs{{0, bytes}} : Runs{};
}

// The bytes of the non-empty blocks (counts and displacements in elements of
// e bytes), in order of displacement, overlapping or adjacent ones merged.
Runs block_runs(const std::vector<int64_t>& counts, const std::vector<int64_t>& displs, int64_t e) {
  Runs blocks;
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] > 0) blocks.push_back({displs[i] * e, (displs[i] + counts[i]) * e});
  std::sort(blocks.begin(), blocks.end(), [](const Run& a, const Run& b) { return a.begin < b.begin; });
  Runs runs;
  for (const Run& b : blocks) {
    if (!runs.empty() && b.begin <= runs.back().end) {
      runs.back().end = std::max(runs.back().end, b.end);
    } else {
      runs.push_back(b);
    }
  }
  return runs;
}

int64_t extent_of(const Runs& runs) {
  return runs.empty() ? 0 : runs.back().end;
}

// One operation's host side: the pooled host buffers it passes to the wrapped
// operation, and the copies back that run once that operation has completed.
struct StagedOp final : PendingOp {
  const char* kind = "";  // the operation, for staged_count
  std::unique_ptr<PendingOp> inner;
  std::vector<std::unique_ptr<StagingBuffer>> buffers;
  struct Back {
    char* dev;
    const char* host;
    int64_t bytes;
  };
  std::vector<Back> back;
  bool described = false, done = false;

  // The pointer the wrapped operation gets for `buf` (`extent` bytes): buf
  // itself on the host; else a pooled host buffer, with the `out` runs copied
  // into it now and the `back_runs` copied back on completion.
  char* stage(const void* buf, int64_t extent, const Runs& out, const Runs& back_runs) {
    char* dev = static_cast<char*>(const_cast<void*>(buf));
    if (extent <= 0 || device_of(buf) == kHost) return dev;
    buffers.push_back(staging_buffer_pool().take(static_cast<size_t>(extent)));
    char* host = buffers.back()->data();
    for (const Run& r : out) {
      copy_to_host(host + r.begin, dev + r.begin, r.end - r.begin, kStagingLabel);
      count_copy(kind, true, r.end - r.begin);
    }
    for (const Run& r : back_runs)
      back.push_back({dev + r.begin, host + r.begin, r.end - r.begin});
    return host;
  }

  bool poll() override {
    if (done) return true;
    if (!described) {  // the wrapped operation's errors name the call, as Group described it
      inner->op = op;
      inner->seq = seq;
      inner->partner = partner;
      inner->axis = axis;
      inner->label = label;
      described = true;
    }
    if (!inner->poll()) return false;
    for (const Back& b : back) {
      copy_from_host(b.dev, b.host, b.bytes, kStagingLabel);
      count_copy(kind, false, b.bytes);
    }
    // Only a completed operation hands its buffers back (one that failed frees them).
    for (auto& b : buffers)
      staging_buffer_pool().give(std::move(b));
    buffers.clear();
    done = true;
    return true;
  }
};

std::unique_ptr<StagedOp> start(const char* kind) {
  auto s = std::make_unique<StagedOp>();
  s->kind = kind;
  return s;
}

// The operation to return: the wrapped one itself when nothing was staged.
std::unique_ptr<PendingOp> finish(std::unique_ptr<StagedOp> s, std::unique_ptr<PendingOp> inner) {
  if (s->buffers.empty()) return inner;
  s->inner = std::move(inner);
  return s;
}

// The staging of an all-reduce (either sum order): one host buffer both ways.
template <class Call>
std::unique_ptr<PendingOp> stage_all_reduce(void* buf, int64_t count, ElemType type, Call&& call) {
  auto s = start("all_reduce");
  const int64_t nb = count * elem_size(type);
  char* h = s->stage(buf, nb, whole(nb), whole(nb));
  return finish(std::move(s), call(h));
}

// The staging of a reduce-scatter over P ranks (either sum order).
template <class Call>
std::unique_ptr<PendingOp> stage_reduce_scatter(const void* send, void* recv, int64_t count, ElemType type,
                                                int P, Call&& call) {
  auto s = start("reduce_scatter");
  const int64_t nb = count * elem_size(type), all = P * nb;
  const char* send_h = s->stage(send, all, whole(all), {});
  char* recv_h = s->stage(recv, nb, {}, whole(nb));
  return finish(std::move(s), call(send_h, recv_h));
}

}  // namespace

StagedBytes staged_count(const std::string& op) {
  auto& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  const auto it = c.by_op.find(op);
  return it == c.by_op.end() ? StagedBytes{} : it->second;
}

std::map<std::string, StagedBytes> staged_counts() {
  auto& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.by_op;
}

void reset_staged_counts() {
  auto& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  c.by_op.clear();
}

StagedBackend::StagedBackend(std::shared_ptr<Backend> wrapped) : wrapped_(std::move(wrapped)) {
  MT_CHECK(wrapped_ != nullptr, "a staged backend needs a backend to wrap");
}

std::shared_ptr<Backend> StagedBackend::split(int color, int key) const {
  return std::make_shared<StagedBackend>(wrapped_->split(color, key));
}

std::unique_ptr<PendingOp> StagedBackend::all_reduce(void* buf, int64_t count, ElemType type, ReduceOp op) {
  return stage_all_reduce(buf, count, type,
                          [&](char* h) { return wrapped_->all_reduce(h, count, type, op); });
}

std::unique_ptr<PendingOp> StagedBackend::all_gather(const void* send, void* recv, int64_t count,
                                                     ElemType type) {
  auto s = start("all_gather");
  const int64_t nb = count * elem_size(type), all = size() * nb;
  // In place (send == recv + rank·n) too: the send block is copied out on its
  // own, and the whole result back, so the bytes are those of the convention.
  const char* send_h = s->stage(send, nb, whole(nb), {});
  char* recv_h = s->stage(recv, all, {}, whole(all));
  return finish(std::move(s), wrapped_->all_gather(send_h, recv_h, count, type));
}

std::unique_ptr<PendingOp> StagedBackend::reduce_scatter(const void* send, void* recv, int64_t count,
                                                         ElemType type, ReduceOp op) {
  return stage_reduce_scatter(send, recv, count, type, size(), [&](const char* send_h, char* recv_h) {
    return wrapped_->reduce_scatter(send_h, recv_h, count, type, op);
  });
}

std::unique_ptr<PendingOp> StagedBackend::broadcast(void* buf, int64_t count, ElemType type, int root) {
  auto s = start("broadcast");
  const int64_t nb = count * elem_size(type);
  const bool am_root = rank() == root;
  char* h = s->stage(buf, nb, am_root ? whole(nb) : Runs{}, am_root ? Runs{} : whole(nb));
  return finish(std::move(s), wrapped_->broadcast(h, count, type, root));
}

std::unique_ptr<PendingOp> StagedBackend::all_to_all(const void* send, void* recv, int64_t count,
                                                     ElemType type) {
  auto s = start("all_to_all");
  const int64_t all = size() * count * elem_size(type);
  const char* send_h = s->stage(send, all, whole(all), {});
  char* recv_h = s->stage(recv, all, {}, whole(all));
  return finish(std::move(s), wrapped_->all_to_all(send_h, recv_h, count, type));
}

std::unique_ptr<PendingOp> StagedBackend::all_to_allv(const void* send,
                                                      const std::vector<int64_t>& send_counts,
                                                      const std::vector<int64_t>& send_displs, void* recv,
                                                      const std::vector<int64_t>& recv_counts,
                                                      const std::vector<int64_t>& recv_displs,
                                                      ElemType type) {
  auto s = start("all_to_allv");
  const int64_t e = elem_size(type);
  const Runs out = block_runs(send_counts, send_displs, e);
  const Runs back = block_runs(recv_counts, recv_displs, e);
  const char* send_h = s->stage(send, extent_of(out), out, {});
  char* recv_h = s->stage(recv, extent_of(back), {}, back);
  return finish(std::move(s), wrapped_->all_to_allv(send_h, send_counts, send_displs, recv_h, recv_counts,
                                                    recv_displs, type));
}

std::unique_ptr<PendingOp> StagedBackend::send(const void* buf, int64_t count, ElemType type, int peer,
                                               int tag) {
  auto s = start("send");
  const int64_t nb = count * elem_size(type);
  const char* h = s->stage(buf, nb, whole(nb), {});
  return finish(std::move(s), wrapped_->send(h, count, type, peer, tag));
}

std::unique_ptr<PendingOp> StagedBackend::recv(void* buf, int64_t count, ElemType type, int peer, int tag) {
  auto s = start("recv");
  const int64_t nb = count * elem_size(type);
  char* h = s->stage(buf, nb, {}, whole(nb));
  return finish(std::move(s), wrapped_->recv(h, count, type, peer, tag));
}

std::unique_ptr<PendingOp> StagedBackend::all_reduce_ordered(void* buf, int64_t count, ElemType type,
                                                             SumOrder order) {
  return stage_all_reduce(buf, count, type,
                          [&](char* h) { return wrapped_->all_reduce_ordered(h, count, type, order); });
}

std::unique_ptr<PendingOp> StagedBackend::reduce_scatter_ordered(const void* send, void* recv, int64_t count,
                                                                 ElemType type, SumOrder order) {
  return stage_reduce_scatter(send, recv, count, type, size(), [&](const char* send_h, char* recv_h) {
    return wrapped_->reduce_scatter_ordered(send_h, recv_h, count, type, order);
  });
}

void StagedBackend::abort_job(int status) {
  wrapped_->abort_job(status);
  std::_Exit(status);  // not reached: the wrapped abort_job does not return
}

std::shared_ptr<Backend> wrap_for_device(std::shared_ptr<Backend> b) {
  if (run_allocator().device() == kHost || dynamic_cast<StagedBackend*>(b.get()) != nullptr) return b;
  return std::make_shared<StagedBackend>(std::move(b));
}

}  // namespace mt
