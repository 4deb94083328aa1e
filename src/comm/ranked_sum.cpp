#include "comm/ranked_sum.h"

#include <cstring>
#include <vector>

#include "comm/buffer_pool.h"
#include "core/error.h"
#include "core/exact_sum.h"

namespace mt {

void sum_in_rank_order(void* dst, const void* parts, int ranks, int64_t n, ElemType type) {
  auto run = [&](auto* d, const auto* x) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t k = 0; k < n; ++k) {
      auto s = x[k];
      for (int r = 1; r < ranks; ++r)
        s += x[static_cast<int64_t>(r) * n + k];
      d[k] = s;
    }
  };
  if (type == ElemType::f32) {
    run(static_cast<float*>(dst), static_cast<const float*>(parts));
  } else {
    MT_CHECK(type == ElemType::f64, "sum_in_rank_order: f32 or f64 only");
    run(static_cast<double*>(dst), static_cast<const double*>(parts));
  }
}

void sum_in_order(void* dst, const void* parts, int ranks, int64_t n, ElemType type, SumOrder order) {
  if (order != SumOrder::tree) {
    sum_in_rank_order(dst, parts, ranks, n, type);
  } else if (type == ElemType::f32) {
    sum_in_tree_order(static_cast<float*>(dst), static_cast<const float*>(parts), ranks, n);
  } else {
    MT_CHECK(type == ElemType::f64, "sum_in_order: f32 or f64 only");
    sum_in_tree_order(static_cast<double*>(dst), static_cast<const double*>(parts), ranks, n);
  }
}

namespace {

// Element block of rank j when `count` elements are split over P ranks: the
// first count % P blocks hold one element more.
int64_t block_begin(int64_t count, int P, int j) {
  const int64_t q = count / P, r = count % P;
  return j * q + (j < r ? j : r);
}

// The tags of the summed blocks' messages: one per call in flight, cycling
// (fewer than kTagCount ranked all-reduces are ever in flight on one backend).
constexpr int kTagBase = 16384, kTagCount = 16383;

// The state machine behind the ranked all-reduce: exchange → sum → send back.
// poll() advances it; the sum runs on the thread that polls. The second
// exchange is point to point rather than a collective: ranks observe the end
// of the first exchange at different moments, so with several calls in flight
// they would start their second collectives in different orders, which MPI
// matches by order; messages matched by a per-call tag cannot be confused.
struct RankedAllReduce final : PendingOp {
  Backend* b = nullptr;
  char* buf = nullptr;
  ElemType type = ElemType::f32;
  int64_t esize = 4;
  SumOrder order = SumOrder::ranks;
  int P = 1, me = 0, tag = 0;
  std::vector<int64_t> begin, size;
  // [P, my block] received; my block summed (pooled: comm/buffer_pool.h)
  std::unique_ptr<std::vector<char>> parts, mine;
  std::unique_ptr<PendingOp> scatter;
  std::vector<std::unique_ptr<PendingOp>> gather;  // sends of my block, receives of the others'
  int phase = 0;                                   // 1: scatter in flight, 2: gather in flight, 3: done

  void start_gather() {
    const int64_t n = size[static_cast<size_t>(me)];
    sum_in_order(mine->data(), parts->data(), P, n, type, order);
    std::memcpy(buf + begin[static_cast<size_t>(me)] * esize, mine->data(), static_cast<size_t>(n * esize));
    for (int j = 0; j < P; ++j) {
      if (j == me) continue;
      const auto J = static_cast<size_t>(j);
      if (size[J] > 0) gather.push_back(b->recv(buf + begin[J] * esize, size[J], type, j, tag));
      if (n > 0) gather.push_back(b->send(mine->data(), n, type, j, tag));
    }
  }

  ~RankedAllReduce() override {
    if (phase != 3) return;  // only a finished call hands its buffers back (an error ends the job)
    comm_buffer_pool().give(std::move(parts));
    comm_buffer_pool().give(std::move(mine));
  }

  bool poll() override {
    if (phase == 1) {
      if (!scatter->poll()) return false;
      start_gather();
      phase = 2;
    }
    if (phase == 2) {
      bool done = true;
      for (auto& g : gather)
        done = g->poll() && done;
      if (!done) return false;
      phase = 3;
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<PendingOp> ranked_all_reduce(Backend& b, void* buf, int64_t count, ElemType type,
                                             SumOrder order) {
  auto op = std::make_unique<RankedAllReduce>();
  op->order = order;
  op->b = &b;
  op->buf = static_cast<char*>(buf);
  op->type = type;
  op->esize = elem_size(type);
  op->P = b.size();
  op->me = b.rank();
  op->tag = kTagBase + static_cast<int>(b.next_ranked_call() % kTagCount);
  const auto P = static_cast<size_t>(op->P);
  op->begin.resize(P);
  op->size.resize(P);
  for (int j = 0; j < op->P; ++j) {
    op->begin[static_cast<size_t>(j)] = block_begin(count, op->P, j);
    op->size[static_cast<size_t>(j)] = block_begin(count, op->P, j + 1) - op->begin[static_cast<size_t>(j)];
  }
  const int64_t n = op->size[static_cast<size_t>(op->me)];
  std::vector<int64_t> counts(P, n), displs(P);
  for (size_t j = 0; j < P; ++j)
    displs[j] = static_cast<int64_t>(j) * n;
  op->parts = comm_buffer_pool().take(static_cast<size_t>(static_cast<int64_t>(P) * n * op->esize));
  op->mine = comm_buffer_pool().take(static_cast<size_t>(n * op->esize));
  // MPI reads the count arrays until completion: the backend's op keeps its copies.
  op->scatter = b.all_to_allv(buf, op->size, op->begin, op->parts->data(), counts, displs, type);
  op->phase = 1;
  return op;
}

namespace {

struct RankedReduceScatter final : PendingOp {
  void* recv = nullptr;
  ElemType type = ElemType::f32;
  SumOrder order = SumOrder::ranks;
  int P = 1;
  int64_t n = 0;
  std::unique_ptr<std::vector<char>> parts;  // [P, n]: rank i's block for this rank (pooled)
  std::unique_ptr<PendingOp> cur;
  bool done = false;

  bool poll() override {
    if (done) return true;
    if (!cur->poll()) return false;
    sum_in_order(recv, parts->data(), P, n, type, order);
    done = true;
    comm_buffer_pool().give(std::move(parts));
    return true;
  }
};

}  // namespace

std::unique_ptr<PendingOp> ranked_reduce_scatter(Backend& b, const void* send, void* recv, int64_t count,
                                                 ElemType type, SumOrder order) {
  auto op = std::make_unique<RankedReduceScatter>();
  op->order = order;
  op->recv = recv;
  op->type = type;
  op->P = b.size();
  op->n = count;
  op->parts = comm_buffer_pool().take(static_cast<size_t>(op->P * count * elem_size(type)));
  op->cur = b.all_to_all(send, op->parts->data(), count, type);
  return op;
}

std::unique_ptr<PendingOp> Backend::all_reduce_ordered(void* buf, int64_t count, ElemType type,
                                                       SumOrder order) {
  return ranked_all_reduce(*this, buf, count, type, order);
}

std::unique_ptr<PendingOp> Backend::reduce_scatter_ordered(const void* send, void* recv, int64_t count,
                                                           ElemType type, SumOrder order) {
  return ranked_reduce_scatter(*this, send, recv, count, type, order);
}

}  // namespace mt
