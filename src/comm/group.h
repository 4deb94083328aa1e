// Communication between ranks. A Group is a value: (rank, size, axis name)
// over a backend that implements one virtual per collective (Open MPI today,
// NCCL later). Every call is recorded in the process's comm ledger and guarded
// by the watchdog (see context.h).
//
// Contracts, for a group of size P (counts are ELEMENTS, not bytes):
//   all_reduce(buf, n)            in place: buf[n] ← Σ_ranks buf[n] (or max).
//   all_gather(send, recv, n)     send[n] from each rank; recv[P·n] = rank 0's n, rank 1's n, …
//                                 In place when send == recv + rank·n.
//   reduce_scatter(send, recv, n) send[P·n]; recv[n] ← Σ_ranks send[rank·n, rank·n + n) of this rank's slot.
//                                 recv must not overlap send.
//   broadcast(buf, n, root)       buf[n] on every rank ← root's buf[n].
//   all_to_all(send, recv, n)     send[P·n], recv[P·n]: block j of send goes to rank j, block i of recv
//                                 came from rank i.
//   all_to_allv                   as all_to_all with per-rank counts and displacements (elements).
//   send / recv                   point to point, count elements, with a tag.
// Every collective must be called by every rank of the group, in the same order.
// The *_async forms start the operation and return a Work; the buffers must stay
// untouched until Work::wait() returns (or test() returns true).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

enum class ReduceOp { sum, max };
enum class ElemType { f32, f64, i32, i64 };
// How a sum over ranks is grouped. library: the transport's own algorithm (its
// grouping may change with the count: Open MPI sums 4 ranks pairwise for small
// messages, in ring order for large ones). ranks: every element is summed as
// ((x0 + x1) + x2) + … in rank order whatever the count, so that a tensor
// reduced in chunks equals it reduced whole, bit for bit (comm/ranked_sum.h;
// f32 and f64 only). tree: every element summed as the canonical tree over
// the ranks (core/exact_sum.h CanonicalTree: ((x0 + x1) + (x2 + x3)) + …), the
// DP reduction of the canonical mode (docs/PARALLELISM.md "The canonical mode").
// With 2 ranks all three give x0 + x1.
enum class SumOrder { library, ranks, tree };

class CommContext;  // ledger, watchdog settings, current step (context.h)
class Backend;      // one implementation per transport (backend.h)
struct PendingOp;   // backend-specific state of a non-blocking operation

// Handle to a non-blocking operation. wait() blocks (under the watchdog) until
// the operation completes; test() makes progress and reports completion.
// Either records the call in the ledger once it has completed, and the Work is
// then empty (valid() false; wait() returns at once, test() returns true).
// Destroying an unfinished Work, or assigning over it, waits for it.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<PendingOp> op) : op_(std::move(op)) {}
  ~Work();
  Work(Work&&) noexcept = default;
  Work& operator=(Work&&) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  void wait();
  bool test();
  bool valid() const { return op_ != nullptr; }

 private:
  std::shared_ptr<PendingOp> op_;
};

class Group {
 public:
  Group() = default;
  Group(std::shared_ptr<Backend> backend, std::shared_ptr<CommContext> ctx, std::string axis);

  int rank() const;
  int size() const;
  const std::string& axis() const { return axis_; }  // "world", "dp", "tp", "dp+cp", …
  // The MPI world rank of this group's rank r.
  int world_rank_of(int r) const;
  // The link this group's traffic takes, from the job's nodes (CommContext::
  // node_of_world_rank): "node" when all its ranks share one node, "across"
  // when it spans nodes, "" when the nodes are not known.
  const std::string& link() const;
  CommContext& context() const { return *ctx_; }

  // Ranks with the same color form a new group, ordered by key (MPI_Comm_split).
  Group split(int color, int key, std::string axis) const;
  // This group for the run's device (core/device.h run_allocator), on the same
  // communicator: itself when that device is the host; else its backend behind
  // the host-staging decorator (comm/staged_backend.h), which copies every
  // device buffer through host memory. Call it on the world once the run's
  // device is set, before splitting: the groups split from it stage too.
  Group for_run_device() const;

  // `label` names the call site for the ledger, the watchdog and --explain
  // ("layer 3 backward: grad bucket 2").
  void all_reduce(void* buf, int64_t count, ElemType type, ReduceOp op, std::string_view label);
  Work all_reduce_async(void* buf, int64_t count, ElemType type, ReduceOp op, std::string_view label);
  void all_gather(const void* send, void* recv, int64_t count, ElemType type, std::string_view label);
  Work all_gather_async(const void* send, void* recv, int64_t count, ElemType type, std::string_view label);
  void reduce_scatter(const void* send, void* recv, int64_t count, ElemType type, ReduceOp op,
                      std::string_view label);
  Work reduce_scatter_async(const void* send, void* recv, int64_t count, ElemType type, ReduceOp op,
                            std::string_view label);
  // Sums (ReduceOp::sum) in the given order; same contracts and ledger names.
  void all_reduce(void* buf, int64_t count, ElemType type, SumOrder order, std::string_view label);
  Work all_reduce_async(void* buf, int64_t count, ElemType type, SumOrder order, std::string_view label);
  void reduce_scatter(const void* send, void* recv, int64_t count, ElemType type, SumOrder order,
                      std::string_view label);
  Work reduce_scatter_async(const void* send, void* recv, int64_t count, ElemType type, SumOrder order,
                            std::string_view label);
  void broadcast(void* buf, int64_t count, ElemType type, int root, std::string_view label);
  void all_to_all(const void* send, void* recv, int64_t count, ElemType type, std::string_view label);
  void all_to_allv(const void* send, const std::vector<int64_t>& send_counts,
                   const std::vector<int64_t>& send_displs, void* recv,
                   const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                   ElemType type, std::string_view label);
  void send(const void* buf, int64_t count, ElemType type, int peer, int tag, std::string_view label);
  void recv(void* buf, int64_t count, ElemType type, int peer, int tag, std::string_view label);
  Work send_async(const void* buf, int64_t count, ElemType type, int peer, int tag, std::string_view label);
  Work recv_async(void* buf, int64_t count, ElemType type, int peer, int tag, std::string_view label);
  void barrier(std::string_view label);

  // Typed conveniences for the common cases.
  void all_reduce(float* buf, int64_t n, std::string_view label, ReduceOp op = ReduceOp::sum) {
    all_reduce(buf, n, ElemType::f32, op, label);
  }
  void all_reduce(double* buf, int64_t n, std::string_view label, ReduceOp op = ReduceOp::sum) {
    all_reduce(buf, n, ElemType::f64, op, label);
  }
  void all_reduce(int64_t* buf, int64_t n, std::string_view label, ReduceOp op = ReduceOp::sum) {
    all_reduce(buf, n, ElemType::i64, op, label);
  }

 private:
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<CommContext> ctx_;
  std::string axis_;
  mutable std::string link_;  // link(), once known
};

int64_t elem_size(ElemType t);
const char* elem_type_name(ElemType t);

}  // namespace mt
