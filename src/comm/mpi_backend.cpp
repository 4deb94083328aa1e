#include "comm/mpi_backend.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/buffer_pool.h"
#include "comm/lifeline.h"
#include "core/error.h"

namespace mt {

void mpi_check(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    std::snprintf(text, sizeof text, "MPI error code %d", rc);
  // "MPI_Iallreduce(buf, …)" → "MPI_Iallreduce"; "/abs/path/src/comm/x.cpp" → "src/comm/x.cpp".
  const std::string call_text(call);
  const std::string name = call_text.substr(0, call_text.find('('));
  const char* src = std::strstr(file, "src/");
  MT_THROW(Error, src ? src : file, ":", line, ": ", name, " failed: ", text);
}

namespace {

// A started MPI request. MPI reads the all_to_allv count arrays until the
// operation completes, so they live here.
struct MpiOp final : PendingOp {
  MPI_Request request = MPI_REQUEST_NULL;
  bool done = false;
  std::vector<int> counts;  // all_to_allv: send counts, send displs, recv counts, recv displs
  // recv: the message must have exactly this many elements.
  int64_t expect_count = -1;
  int peer = -1;
  MPI_Datatype datatype = MPI_DATATYPE_NULL;
  // all_reduce: the result lands here and is copied into the caller's buffer on completion.
  std::unique_ptr<std::vector<char>> result;
  size_t result_bytes = 0;
  void* copy_to = nullptr;

  bool poll() override {
    if (done) return true;
    int flag = 0;
    MPI_Status status;
    MT_MPI_CHECK(MPI_Test(&request, &flag, &status));
    if (!flag) return false;
    done = true;
    if (copy_to != nullptr) {
      std::memcpy(copy_to, result->data(), result_bytes);
      comm_buffer_pool().give(std::move(result));
    }
    if (expect_count >= 0) {
      int got = 0;
      MT_MPI_CHECK(MPI_Get_count(&status, datatype, &got));
      MT_REQUIRE(got == expect_count, Error, "recv on axis ", axis, " (", label, "): expected ", expect_count,
                 " elements from rank ", peer, ", got ", got);
    }
    return true;
  }
};

MPI_Datatype mpi_type(ElemType t) {
  switch (t) {
    case ElemType::f32:
      return MPI_FLOAT;
    case ElemType::f64:
      return MPI_DOUBLE;
    case ElemType::i32:
      return MPI_INT32_T;
    case ElemType::i64:
      return MPI_INT64_T;
  }
  MT_THROW(Error, "unknown ElemType ", static_cast<int>(t));
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::max ? MPI_MAX : MPI_SUM;
}

// MPI counts are int: refuse larger ones instead of truncating them.
int to_int(int64_t n, const char* op, const char* what) {
  MT_REQUIRE(n <= INT_MAX, Error, op, ": ", what, " (", n, ") exceeds MPI's limit of ", INT_MAX,
             " elements per call; split the transfer");
  return static_cast<int>(n);
}

std::unique_ptr<MpiOp> new_op() {
  return std::make_unique<MpiOp>();
}

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm) : comm_(comm) {
  MT_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  MT_MPI_CHECK(MPI_Comm_dup(comm_, &roll_));  // collective, as every construction (split, the world) is
  MT_MPI_CHECK(MPI_Comm_set_errhandler(roll_, MPI_ERRORS_RETURN));
  out_.assign(static_cast<size_t>(size_), -1);
  out_requests_.assign(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  heard_.assign(static_cast<size_t>(size_), -1);
  world_ranks_.resize(static_cast<size_t>(size_));
  std::vector<int> mine(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r)
    mine[static_cast<size_t>(r)] = r;
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MT_MPI_CHECK(MPI_Comm_group(comm_, &group));
  MT_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  MT_MPI_CHECK(MPI_Group_translate_ranks(group, size_, mine.data(), world, world_ranks_.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&world);
}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (roll_ != MPI_COMM_NULL) {
    try {
      take_announcements();
    } catch (...) {  // a destructor reports nothing: the communicator goes either way
    }
    for (MPI_Request& r : out_requests_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);  // an 8-byte send completes on its own
    MPI_Comm_free(&roll_);
  }
  if (comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_SELF) MPI_Comm_free(&comm_);
}

namespace {
constexpr int kAnnounceTag = 1;
}  // namespace

void MpiBackend::announce_wait(int64_t seq) {
  for (int r = 0; r < size_; ++r) {
    const auto i = static_cast<size_t>(r);
    if (r == rank_) continue;
    if (out_requests_[i] != MPI_REQUEST_NULL) {
      int done = 0;
      MT_MPI_CHECK(MPI_Test(&out_requests_[i], &done, MPI_STATUS_IGNORE));
      if (!done) continue;  // the last one is still on its way: its buffer is not free
    }
    out_[i] = seq;
    MT_MPI_CHECK(MPI_Isend(&out_[i], 1, MPI_INT64_T, r, kAnnounceTag, roll_, &out_requests_[i]));
  }
}

void MpiBackend::take_announcements() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MT_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kAnnounceTag, roll_, &flag, &status));
    if (!flag) return;
    int64_t seq = -1;
    MT_MPI_CHECK(MPI_Recv(&seq, 1, MPI_INT64_T, status.MPI_SOURCE, kAnnounceTag, roll_, MPI_STATUS_IGNORE));
    int64_t& h = heard_[static_cast<size_t>(status.MPI_SOURCE)];
    h = std::max(h, seq);
  }
}

std::vector<int64_t> MpiBackend::heard_waits() {
  take_announcements();
  return heard_;
}

std::shared_ptr<Backend> MpiBackend::split(int color, int key) const {
  MPI_Comm sub = MPI_COMM_NULL;
  MT_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  return std::make_shared<MpiBackend>(sub);
}

std::unique_ptr<PendingOp> MpiBackend::all_reduce(void* buf, int64_t count, ElemType type, ReduceOp op) {
  auto p = new_op();
  const int n = to_int(count, "all_reduce", "count");
  // Out of place into a pooled buffer, then copied back (see BufferPool).
  p->result_bytes = static_cast<size_t>(count * elem_size(type));
  p->result = comm_buffer_pool().take(p->result_bytes);
  p->copy_to = buf;
  MT_MPI_CHECK(MPI_Iallreduce(buf, p->result->data(), n, mpi_type(type), mpi_op(op), comm_, &p->request));
  return p;
}

std::unique_ptr<PendingOp> MpiBackend::all_gather(const void* send, void* recv, int64_t count,
                                                  ElemType type) {
  auto p = new_op();
  const int n = to_int(count, "all_gather", "count");
  const char* own_slot = static_cast<const char*>(recv) + rank_ * count * elem_size(type);
  const void* src = send == own_slot ? MPI_IN_PLACE : send;
  MT_MPI_CHECK(MPI_Iallgather(src, n, mpi_type(type), recv, n, mpi_type(type), comm_, &p->request));
  return p;
}

std::unique_ptr<PendingOp> MpiBackend::reduce_scatter(const void* send, void* recv, int64_t count,
                                                      ElemType type, ReduceOp op) {
  auto p = new_op();
  const int n = to_int(count, "reduce_scatter", "count");
  MT_MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, n, mpi_type(type), mpi_op(op), comm_, &p->request));
  return p;
}

std::unique_ptr<PendingOp> MpiBackend::broadcast(void* buf, int64_t count, ElemType type, int root) {
  auto p = new_op();
  const int n = to_int(count, "broadcast", "count");
  MT_MPI_CHECK(MPI_Ibcast(buf, n, mpi_type(type), root, comm_, &p->request));
  return p;
}

std::unique_ptr<PendingOp> MpiBackend::all_to_all(const void* send, void* recv, int64_t count,
                                                  ElemType type) {
  auto p = new_op();
  const int n = to_int(count, "all_to_all", "count");
  MT_MPI_CHECK(MPI_Ialltoall(send, n, mpi_type(type), recv, n, mpi_type(type), comm_, &p->request));
  return p;
}

std::unique_ptr<PendingOp> MpiBackend::all_to_allv(const void* send, const std::vector<int64_t>& send_counts,
                                                   const std::vector<int64_t>& send_displs, void* recv,
                                                   const std::vector<int64_t>& recv_counts,
                                                   const std::vector<int64_t>& recv_displs, ElemType type) {
  auto p = new_op();
  const size_t P = static_cast<size_t>(size_);
  p->counts.resize(4 * P);
  const std::vector<int64_t>* parts[4] = {&send_counts, &send_displs, &recv_counts, &recv_displs};
  const char* names[4] = {"a send count", "a send displacement", "a recv count", "a recv displacement"};
  for (size_t k = 0; k < 4; ++k) {
    for (size_t i = 0; i < P; ++i)
      p->counts[k * P + i] = to_int((*parts[k])[i], "all_to_allv", names[k]);
  }
  const int* c = p->counts.data();
  MT_MPI_CHECK(MPI_Ialltoallv(send, c, c + P, mpi_type(type), recv, c + 2 * P, c + 3 * P, mpi_type(type),
                              comm_, &p->request));
  return p;
}

std::unique_ptr<PendingOp> MpiBackend::send(const void* buf, int64_t count, ElemType type, int peer,
                                            int tag) {
  auto p = new_op();
  const int n = to_int(count, "send", "count");
  MT_MPI_CHECK(MPI_Isend(buf, n, mpi_type(type), peer, tag, comm_, &p->request));
  return p;
}

std::unique_ptr<PendingOp> MpiBackend::recv(void* buf, int64_t count, ElemType type, int peer, int tag) {
  auto p = new_op();
  const int n = to_int(count, "recv", "count");
  p->expect_count = count;
  p->peer = peer;
  p->datatype = mpi_type(type);
  MT_MPI_CHECK(MPI_Irecv(buf, n, p->datatype, peer, tag, comm_, &p->request));
  return p;
}

std::unique_ptr<PendingOp> MpiBackend::barrier() {
  auto p = new_op();
  MT_MPI_CHECK(MPI_Ibarrier(comm_, &p->request));
  return p;
}

void MpiBackend::abort_job(int status) {
  lifeline_goodbye();  // the peers end by our MPI_Abort: they must not report this rank lost
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // MPI_Abort does not return; this is for an MPI that does
}

}  // namespace mt
