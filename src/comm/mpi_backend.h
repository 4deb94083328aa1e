// The Open MPI (any MPI-3) implementation of Backend over one communicator.
// Internal to comm/: nothing above this folder includes <mpi.h>.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "comm/backend.h"

namespace mt {

// Throws mt::Error("<file>:<line>: <MPI function> failed: <MPI's error string>")
// unless rc is MPI_SUCCESS. Communicators are set to MPI_ERRORS_RETURN so that
// errors come back here as codes instead of aborting inside MPI.
void mpi_check(int rc, const char* call, const char* file, int line);
#define MT_MPI_CHECK(call) ::mt::mpi_check((call), #call, __FILE__, __LINE__)

class MpiBackend final : public Backend {
 public:
  // Takes ownership of `comm` (freed on destruction while MPI is still running)
  // and sets MPI_ERRORS_RETURN on it.
  explicit MpiBackend(MPI_Comm comm);
  ~MpiBackend() override;
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;

  MPI_Comm comm() const { return comm_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank() const override { return world_rank_; }
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
  std::unique_ptr<PendingOp> barrier() override;

  [[noreturn]] void abort_job(int status) override;

  int world_rank_of(int r) const override { return world_ranks_[static_cast<size_t>(r)]; }
  void announce_wait(int64_t seq) override;
  std::vector<int64_t> heard_waits() override;

 protected:
  void take_announcements() override;

 private:
  MPI_Comm comm_;
  // The watchdog's announcements travel on a copy of comm_, so that they never
  // match a receive of ours; one buffer and request per peer (a send still in
  // flight is not repeated).
  MPI_Comm roll_ = MPI_COMM_NULL;
  std::vector<int64_t> out_;
  std::vector<MPI_Request> out_requests_;
  std::vector<int64_t> heard_;
  std::vector<int> world_ranks_;
  int rank_ = 0;
  int size_ = 1;
  int world_rank_ = 0;
};

}  // namespace mt
