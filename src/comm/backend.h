// The transport behind a Group: one virtual per collective (c10d `Backend`,
// mlx `distributed::GroupImpl`). Group validates arguments that any transport
// would reject (negative counts, ranks out of range, vector sizes) before it
// calls here; a backend checks only its own limits (MPI: counts ≤ INT_MAX).
//
// Every operation is non-blocking: it starts the transfer and returns a
// PendingOp whose poll() makes progress. Blocking calls are "start + wait"
// in Group, so that every wait runs under the watchdog (work.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"

namespace mt {

class CommContext;

// State of one started operation. The backend derives from it to keep its
// request handle (and anything the transport needs alive until completion);
// Group fills in the description that the ledger and the watchdog report.
struct PendingOp {
  virtual ~PendingOp() = default;
  // Makes progress; true once the operation is complete (then the buffers are
  // free again). Throws mt::Error if the transport reports an error.
  virtual bool poll() = 0;

  std::string op;     // "all_reduce", "send", … (LedgerEntry::op)
  int64_t seq = -1;   // a collective's number on its backend (Backend::next_collective); −1: send or recv
  int partner = -1;   // send or recv: the other side's rank in the group
  std::string axis;   // the group's axis
  std::string link;   // the group's link (Group::link)
  std::string label;  // call site
  int64_t elements = 0;
  int64_t bytes = 0;
  int64_t step = -1;
  std::chrono::steady_clock::time_point start;
  std::shared_ptr<CommContext> ctx;  // ledger and watchdog timeout
  std::shared_ptr<Backend> backend;  // keeps the communicator alive; ends the job on a stall
  bool recorded = false;             // the ledger has this op
  double waited = 0;                 // seconds spent in Work::wait() (LedgerEntry::wait_seconds)
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This process's rank in the whole job, for messages.
  virtual int world_rank() const = 0;
  // Collective over this backend's ranks (see Group::split).
  virtual std::shared_ptr<Backend> split(int color, int key) const = 0;

  // Contracts as in group.h; counts and displacements in elements.
  virtual std::unique_ptr<PendingOp> all_reduce(void* buf, int64_t count, ElemType type, ReduceOp op) = 0;
  virtual std::unique_ptr<PendingOp> all_gather(const void* send, void* recv, int64_t count,
                                                ElemType type) = 0;
  virtual std::unique_ptr<PendingOp> reduce_scatter(const void* send, void* recv, int64_t count,
                                                    ElemType type, ReduceOp op) = 0;
  virtual std::unique_ptr<PendingOp> broadcast(void* buf, int64_t count, ElemType type, int root) = 0;
  virtual std::unique_ptr<PendingOp> all_to_all(const void* send, void* recv, int64_t count,
                                                ElemType type) = 0;
  virtual std::unique_ptr<PendingOp> all_to_allv(const void* send, const std::vector<int64_t>& send_counts,
                                                 const std::vector<int64_t>& send_displs, void* recv,
                                                 const std::vector<int64_t>& recv_counts,
                                                 const std::vector<int64_t>& recv_displs, ElemType type) = 0;
  virtual std::unique_ptr<PendingOp> send(const void* buf, int64_t count, ElemType type, int peer,
                                          int tag) = 0;
  virtual std::unique_ptr<PendingOp> recv(void* buf, int64_t count, ElemType type, int peer, int tag) = 0;
  virtual std::unique_ptr<PendingOp> barrier() = 0;
  // The ordered sums (Group's SumOrder::ranks and SumOrder::tree forms), f32
  // or f64: by default ranked_sum.h's, built from this backend's exchanges; a
  // decorator may take one whole (the host-staging one stages its buffers once around it).
  virtual std::unique_ptr<PendingOp> all_reduce_ordered(void* buf, int64_t count, ElemType type,
                                                        SumOrder order);
  virtual std::unique_ptr<PendingOp> reduce_scatter_ordered(const void* send, void* recv, int64_t count,
                                                            ElemType type, SumOrder order);

  // Ends every process of the job with `status` (the message is already printed).
  [[noreturn]] virtual void abort_job(int status) = 0;

  // The world rank of this backend's rank r, for messages.
  virtual int world_rank_of(int r) const = 0;

  // The watchdog's roll call (work.cpp), which names the ranks a stalled
  // collective still waits for. Collectives are numbered in the order this
  // rank starts them on this backend; every rank starts them in the same
  // order, so a number names the same call on every rank.
  int64_t next_collective() {
    if ((collectives_ & 63) == 0) take_announcements();  // a rank that never waits long still drains them
    return collectives_++;
  }
  // Tells every other rank of this backend that this rank waits in collective
  // `seq` (8 bytes to each; sent only by a wait that has lasted a while, so
  // that it costs nothing in a healthy step).
  virtual void announce_wait(int64_t seq) = 0;
  // Takes in the announcements that have arrived, then returns per rank of this
  // backend the highest collective number it announced (−1: none heard).
  virtual std::vector<int64_t> heard_waits() = 0;

  // Counts the rank-ordered all-reduces started on this backend (ranked_sum.h):
  // every rank starts them in the same order, so the count names the same call
  // on every rank and gives its messages a tag of their own.
  int64_t next_ranked_call() { return ranked_calls_++; }

 protected:
  // Receives every announcement that has arrived (heard_waits keeps them).
  virtual void take_announcements() = 0;

 private:
  int64_t ranked_calls_ = 0;
  int64_t collectives_ = 0;
};

}  // namespace mt
