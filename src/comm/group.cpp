#include "comm/group.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "comm/context.h"
#include "comm/staged_backend.h"
#include "core/error.h"

namespace mt {

int64_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::f32:
    case ElemType::i32:
      return 4;
    case ElemType::f64:
    case ElemType::i64:
      return 8;
  }
  MT_THROW(Error, "unknown ElemType ", static_cast<int>(t));
}

const char* elem_type_name(ElemType t) {
  switch (t) {
    case ElemType::f32:
      return "f32";
    case ElemType::f64:
      return "f64";
    case ElemType::i32:
      return "i32";
    case ElemType::i64:
      return "i64";
  }
  return "?";
}

Group::Group(std::shared_ptr<Backend> backend, std::shared_ptr<CommContext> ctx, std::string axis)
    : backend_(std::move(backend)), ctx_(std::move(ctx)), axis_(std::move(axis)) {
  MT_CHECK(backend_ != nullptr && ctx_ != nullptr, "a Group needs a backend and a context");
}

namespace {

Backend& need(const std::shared_ptr<Backend>& b) {
  MT_REQUIRE(b != nullptr, Error, "communication on an empty (default-constructed) Group");
  return *b;
}

void check_count(const char* op, const std::string& axis, int64_t count) {
  MT_REQUIRE(count >= 0, Error, op, " on axis ", axis, ": count (", count, ") must not be negative");
}

void check_rank(const char* op, const std::string& axis, const char* what, int r, int size) {
  MT_REQUIRE(r >= 0 && r < size, Error, op, " on axis ", axis, ": ", what, " (", r, ") must be in [0, ", size,
             ")");
}

std::string link_of(const Backend& b, const CommContext& ctx) {
  const std::vector<int>& node = ctx.node_of_world_rank;
  if (node.empty()) return "";
  const int first = node[static_cast<size_t>(b.world_rank_of(0))];
  for (int r = 1; r < b.size(); ++r) {
    if (node[static_cast<size_t>(b.world_rank_of(r))] != first) return "across";
  }
  return "node";
}

// Starts an operation through `call` and describes it for the ledger and the
// watchdog. `elements` is this rank's send side (see LedgerEntry::bytes).
// `partner`: a send's or recv's other side (−1: a collective, which gets its
// number for the watchdog's roll call).
template <typename Call>
Work start_op(const std::shared_ptr<Backend>& backend, const std::shared_ptr<CommContext>& ctx,
              const std::string& axis, const std::string& link, const char* name, std::string_view label,
              int64_t elements, ElemType type, Call&& call, int partner = -1) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<PendingOp> op = call(need(backend));
  op->seq = partner < 0 ? backend->next_collective() : -1;
  op->partner = partner;
  op->op = name;
  op->axis = axis;
  op->link = link;
  op->label = std::string(label);
  op->elements = elements;
  op->bytes = elements * elem_size(type);
  op->step = ctx->step;
  op->start = start;
  op->ctx = ctx;
  op->backend = backend;
  return Work(std::shared_ptr<PendingOp>(std::move(op)));
}

}  // namespace

int Group::rank() const {
  return need(backend_).rank();
}
int Group::size() const {
  return need(backend_).size();
}

int Group::world_rank_of(int r) const {
  check_rank("world_rank_of", axis_, "rank", r, size());
  return need(backend_).world_rank_of(r);
}

const std::string& Group::link() const {
  // Once the job's nodes are known the answer is fixed: kept, so that a call costs no walk over the ranks.
  if (link_.empty()) link_ = link_of(need(backend_), *ctx_);
  return link_;
}

Group Group::split(int color, int key, std::string axis) const {
  MT_REQUIRE(color >= 0, Error, "split of axis ", axis_, " into ", axis, ": color (", color,
             ") must not be negative");
  return Group(need(backend_).split(color, key), ctx_, std::move(axis));
}

Group Group::for_run_device() const {
  need(backend_);
  return Group(wrap_for_device(backend_), ctx_, axis_);
}

Work Group::all_reduce_async(void* buf, int64_t count, ElemType type, ReduceOp op, std::string_view label) {
  check_count("all_reduce", axis_, count);
  return start_op(backend_, ctx_, axis_, link(), "all_reduce", label, count, type,
                  [&](Backend& b) { return b.all_reduce(buf, count, type, op); });
}

Work Group::all_gather_async(const void* send, void* recv, int64_t count, ElemType type,
                             std::string_view label) {
  check_count("all_gather", axis_, count);
  return start_op(backend_, ctx_, axis_, link(), "all_gather", label, count, type,
                  [&](Backend& b) { return b.all_gather(send, recv, count, type); });
}

Work Group::reduce_scatter_async(const void* send, void* recv, int64_t count, ElemType type, ReduceOp op,
                                 std::string_view label) {
  check_count("reduce_scatter", axis_, count);
  const int64_t bytes = count * elem_size(type);
  const auto s = reinterpret_cast<uintptr_t>(send);
  const auto r = reinterpret_cast<uintptr_t>(recv);
  const bool overlap = bytes > 0 && r < s + static_cast<uintptr_t>(bytes * size()) && s < r + bytes;
  MT_REQUIRE(!overlap, Error, "reduce_scatter on axis ", axis_, " (", label, "): recv must not overlap send");
  return start_op(backend_, ctx_, axis_, link(), "reduce_scatter", label, count * size(), type,
                  [&](Backend& b) { return b.reduce_scatter(send, recv, count, type, op); });
}

namespace {

void check_ranked(const std::string& axis, ElemType type, std::string_view label) {
  MT_REQUIRE(type == ElemType::f32 || type == ElemType::f64, Error, "a rank-ordered sum on axis ", axis, " (",
             label, ") needs f32 or f64, not ", elem_type_name(type));
}

}  // namespace

Work Group::all_reduce_async(void* buf, int64_t count, ElemType type, SumOrder order,
                             std::string_view label) {
  if (order == SumOrder::library) return all_reduce_async(buf, count, type, ReduceOp::sum, label);
  check_count("all_reduce", axis_, count);
  check_ranked(axis_, type, label);
  return start_op(backend_, ctx_, axis_, link(), "all_reduce", label, count, type,
                  [&](Backend& b) { return b.all_reduce_ordered(buf, count, type, order); });
}

void Group::all_reduce(void* buf, int64_t count, ElemType type, SumOrder order, std::string_view label) {
  all_reduce_async(buf, count, type, order, label).wait();
}

Work Group::reduce_scatter_async(const void* send, void* recv, int64_t count, ElemType type, SumOrder order,
                                 std::string_view label) {
  if (order == SumOrder::library) return reduce_scatter_async(send, recv, count, type, ReduceOp::sum, label);
  check_ranked(axis_, type, label);
  check_count("reduce_scatter", axis_, count);
  return start_op(backend_, ctx_, axis_, link(), "reduce_scatter", label, count * size(), type,
                  [&](Backend& b) { return b.reduce_scatter_ordered(send, recv, count, type, order); });
}

void Group::reduce_scatter(const void* send, void* recv, int64_t count, ElemType type, SumOrder order,
                           std::string_view label) {
  reduce_scatter_async(send, recv, count, type, order, label).wait();
}

Work Group::send_async(const void* buf, int64_t count, ElemType type, int peer, int tag,
                       std::string_view label) {
  check_count("send", axis_, count);
  check_rank("send", axis_, "peer", peer, size());
  MT_REQUIRE(tag >= 0, Error, "send on axis ", axis_, ": tag (", tag, ") must not be negative");
  return start_op(
      backend_, ctx_, axis_, link(), "send", label, count, type,
      [&](Backend& b) { return b.send(buf, count, type, peer, tag); }, peer);
}

Work Group::recv_async(void* buf, int64_t count, ElemType type, int peer, int tag, std::string_view label) {
  check_count("recv", axis_, count);
  check_rank("recv", axis_, "peer", peer, size());
  MT_REQUIRE(tag >= 0, Error, "recv on axis ", axis_, ": tag (", tag, ") must not be negative");
  return start_op(
      backend_, ctx_, axis_, link(), "recv", label, count, type,
      [&](Backend& b) { return b.recv(buf, count, type, peer, tag); }, peer);
}

void Group::all_reduce(void* buf, int64_t count, ElemType type, ReduceOp op, std::string_view label) {
  all_reduce_async(buf, count, type, op, label).wait();
}

void Group::all_gather(const void* send, void* recv, int64_t count, ElemType type, std::string_view label) {
  all_gather_async(send, recv, count, type, label).wait();
}

void Group::reduce_scatter(const void* send, void* recv, int64_t count, ElemType type, ReduceOp op,
                           std::string_view label) {
  reduce_scatter_async(send, recv, count, type, op, label).wait();
}

void Group::send(const void* buf, int64_t count, ElemType type, int peer, int tag, std::string_view label) {
  send_async(buf, count, type, peer, tag, label).wait();
}

void Group::recv(void* buf, int64_t count, ElemType type, int peer, int tag, std::string_view label) {
  recv_async(buf, count, type, peer, tag, label).wait();
}

void Group::broadcast(void* buf, int64_t count, ElemType type, int root, std::string_view label) {
  check_count("broadcast", axis_, count);
  check_rank("broadcast", axis_, "root", root, size());
  start_op(backend_, ctx_, axis_, link(), "broadcast", label, count, type, [&](Backend& b) {
    return b.broadcast(buf, count, type, root);
  }).wait();
}

void Group::all_to_all(const void* send, void* recv, int64_t count, ElemType type, std::string_view label) {
  check_count("all_to_all", axis_, count);
  start_op(backend_, ctx_, axis_, link(), "all_to_all", label, count * size(), type, [&](Backend& b) {
    return b.all_to_all(send, recv, count, type);
  }).wait();
}

void Group::all_to_allv(const void* send, const std::vector<int64_t>& send_counts,
                        const std::vector<int64_t>& send_displs, void* recv,
                        const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                        ElemType type, std::string_view label) {
  const size_t P = static_cast<size_t>(size());
  const std::vector<int64_t>* parts[4] = {&send_counts, &send_displs, &recv_counts, &recv_displs};
  const char* names[4] = {"send_counts", "send_displs", "recv_counts", "recv_displs"};
  for (size_t k = 0; k < 4; ++k) {
    MT_REQUIRE(parts[k]->size() == P, Error, "all_to_allv on axis ", axis_, ": ", names[k], " has ",
               parts[k]->size(), " entries but the group has ", P, " ranks");
    for (size_t i = 0; i < P; ++i) {
      MT_REQUIRE((*parts[k])[i] >= 0, Error, "all_to_allv on axis ", axis_, ": ", names[k], "[", i, "] (",
                 (*parts[k])[i], ") must not be negative");
    }
  }
  int64_t sent = 0;
  for (int64_t c : send_counts)
    sent += c;
  start_op(backend_, ctx_, axis_, link(), "all_to_allv", label, sent, type, [&](Backend& b) {
    return b.all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs, type);
  }).wait();
}

void Group::barrier(std::string_view label) {
  start_op(backend_, ctx_, axis_, link(), "barrier", label, 0, ElemType::f32, [](Backend& b) {
    return b.barrier();
  }).wait();
}

}  // namespace mt
