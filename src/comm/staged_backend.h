// Host-staged communication of device buffers: a Backend that wraps another
// (the MPI one, which reads and writes host memory only) for a run whose
// device is not the host (core/device.h run_allocator). Every buffer argument
// on the run's device is copied through a pooled host buffer (comm/
// buffer_pool.h staging_buffer_pool, MemKind::comm): its send side out
// (copy_to_host, crossing label kStagingLabel) before the wrapped operation
// starts, its receive side back (copy_from_host) when the operation completes,
// that is in the PendingOp's poll() that first sees it done; never before, so
// a device buffer keeps its old bytes until wait() or test() reports the end.
// A host buffer passes straight through, and an operation with no device
// buffer is the wrapped one's own. A backend that takes device buffers itself
// (NCCL, docs/GPU.md) needs no decorator.
//
// Bytes staged per operation, for a group of P ranks, count n, e bytes an
// element: out is the comm ledger's send side (comm/context.h LedgerEntry),
// back the receive side.
//   all_reduce       n·e out, n·e back (in place: one host buffer both ways)
//   all_gather       n·e out, P·n·e back (in place as well)
//   reduce_scatter   P·n·e out, n·e back
//   broadcast        root: n·e out, nothing back (its buffer does not change);
//                    the other ranks: nothing out, n·e back
//   all_to_all       P·n·e out, P·n·e back
//   all_to_allv      Σ send_counts·e out, Σ recv_counts·e back: one copy per run
//                    of adjacent blocks, placed at the same displacements in a
//                    host buffer that spans them (blocks that overlap, which
//                    only a send may have, are copied once)
//   send             n·e out;  recv: n·e back;  barrier: nothing
//   the rank-ordered sums (SumOrder::ranks) as all_reduce and reduce_scatter:
//   their exchanges and their sum run on the host copies.
// Only the side on the device is staged (a host send and a device recv stage
// the recv alone), and an empty one (0 bytes) not at all. Each copy is one
// crossing; staged_count() keeps them per operation as well.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/backend.h"

namespace mt {

inline constexpr const char* kStagingLabel = "comm staging";

// Copies and bytes staged, out (device to host, before the operation) and back
// (host to device, on completion).
struct StagedBytes {
  int64_t out_copies = 0, out_bytes = 0;
  int64_t back_copies = 0, back_bytes = 0;
  bool operator==(const StagedBytes&) const = default;
};

// Per process, by operation ("all_reduce", "all_gather", …: the ledger's
// names), since the last reset.
StagedBytes staged_count(const std::string& op);
std::map<std::string, StagedBytes> staged_counts();
void reset_staged_counts();

class StagedBackend final : public Backend {
 public:
  explicit StagedBackend(std::shared_ptr<Backend> wrapped);

  const std::shared_ptr<Backend>& wrapped() const { return wrapped_; }

  int rank() const override { return wrapped_->rank(); }
  int size() const override { return wrapped_->size(); }
  int world_rank() const override { return wrapped_->world_rank(); }
  // A staged backend over the wrapped one's split.
  std::shared_ptr<Backend> split(int color, int key) const override;

  std::unique_ptr<PendingOp> all_reduce(void* buf, int64_t count, ElemType type, ReduceOp op) override;
  std::unique_ptr<PendingOp> all_gather(const void* send, void* recv, int64_t count, ElemType type) override;
  std::unique_ptr<PendingOp> reduce_scatter(const void* send, void* recv, int64_t count, ElemType type,
                                            ReduceOp op) override;
  std::unique_ptr<PendingOp> broadcast(void* buf, int64_t count, ElemType type, int root) override;
  std::unique_ptr<PendingOp> all_to_all(const void* send, void* recv, int64_t count, ElemType type) override;
  std::unique_ptr<PendingOp> all_to_allv(const void* send, const std::vector<int64_t>& send_counts,
                                         const std::vector<int64_t>& send_displs, void* recv,
                                         const std::vector<int64_t>& recv_counts,
                                         const std::vector<int64_t>& recv_displs, ElemType type) override;
  std::unique_ptr<PendingOp> send(const void* buf, int64_t count, ElemType type, int peer, int tag) override;
  std::unique_ptr<PendingOp> recv(void* buf, int64_t count, ElemType type, int peer, int tag) override;
  std::unique_ptr<PendingOp> barrier() override { return wrapped_->barrier(); }
  std::unique_ptr<PendingOp> all_reduce_ordered(void* buf, int64_t count, ElemType type,
                                                SumOrder order) override;
  std::unique_ptr<PendingOp> reduce_scatter_ordered(const void* send, void* recv, int64_t count,
                                                    ElemType type, SumOrder order) override;

  [[noreturn]] void abort_job(int status) override;
  int world_rank_of(int r) const override { return wrapped_->world_rank_of(r); }
  void announce_wait(int64_t seq) override { wrapped_->announce_wait(seq); }
  std::vector<int64_t> heard_waits() override { return wrapped_->heard_waits(); }

 protected:
  void take_announcements() override { wrapped_->heard_waits(); }

 private:
  std::shared_ptr<Backend> wrapped_;
};

// The backend a run communicates through: `b` itself when the run's device is
// the host (so a `cpu` run has no decorator in its path), else b behind a
// StagedBackend (b itself if it is one already).
std::shared_ptr<Backend> wrap_for_device(std::shared_ptr<Backend> b);

}  // namespace mt
