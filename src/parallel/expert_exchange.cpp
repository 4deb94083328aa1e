// Expert parallelism's exchanges (expert_parallel.h): the per-expert counts
// by all-to-all, the rows by all-to-all-v, over the ep group
// (docs/PARALLELISM.md "Expert parallelism").
#include <string>

#include "core/error.h"
#include "parallel/expert_parallel.h"

namespace mt::ep {

namespace {

// Element counts and displacements of blocks of `rows[i]` rows of C floats, back to back.
void element_blocks(const std::vector<int64_t>& rows, int64_t C, std::vector<int64_t>& counts,
                    std::vector<int64_t>& displs) {
  counts.resize(rows.size());
  displs.resize(rows.size());
  int64_t at = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    counts[i] = rows[i] * C;
    displs[i] = at;
    at += counts[i];
  }
}

}  // namespace

// Rank j of the ep group holds experts [j·El, (j+1)·El): block j of the sorted
// counts is what it will receive from this rank.
void ExpertDispatch::exchange_counts(RoutePlan& p, std::string_view label) const {
  const auto P = static_cast<size_t>(group_->size());
  const auto El = static_cast<size_t>(local_experts());
  p.recv_count.assign(P * El, 0);
  group_->all_to_all(p.count.data(), p.recv_count.data(), static_cast<int64_t>(El), ElemType::i64,
                     std::string(label) + ": expert counts");
  p.send_rows.assign(P, 0);
  p.recv_rows.assign(P, 0);
  p.lcount.assign(El, 0);
  for (size_t i = 0; i < P; ++i) {
    p.send_rows[i] = p.offset[(i + 1) * El] - p.offset[i * El];
    for (size_t j = 0; j < El; ++j) {
      p.recv_rows[i] += p.recv_count[i * El + j];
      p.lcount[j] += p.recv_count[i * El + j];
    }
  }
  p.loffset.assign(El + 1, 0);
  for (size_t j = 0; j < El; ++j)
    p.loffset[j + 1] = p.loffset[j] + p.lcount[j];
}

// Between the received order (by source rank, then local expert) and the
// expert-major order (by local expert, then source rank).
void ExpertDispatch::move_rows(float* out, const float* in, const RoutePlan& p, int64_t C,
                               bool to_expert_major) const {
  const auto P = static_cast<size_t>(group_->size());
  const auto El = static_cast<size_t>(local_experts());
  std::vector<int64_t> major(p.loffset.begin(), p.loffset.end() - 1);  // next row of each expert's block
  int64_t src = 0;
  for (size_t i = 0; i < P; ++i) {
    for (size_t j = 0; j < El; ++j) {
      const int64_t n = p.recv_count[i * El + j];
      const int64_t from = to_expert_major ? src : major[j], to = to_expert_major ? major[j] : src;
      copy_bytes(out + to * C, in + from * C, n * C * int64_t{sizeof(float)});
      src += n;
      major[j] += n;
    }
  }
}

void ExpertDispatch::to_experts(float* local, const float* sorted, const RoutePlan& p, int64_t C,
                                std::string_view label) const {
  if (!distributed()) {
    copy_bytes(local, sorted, p.rows() * C * int64_t{sizeof(float)});
    return;
  }
  std::vector<int64_t> sc, sd, rc, rd;
  element_blocks(p.send_rows, C, sc, sd);
  element_blocks(p.recv_rows, C, rc, rd);
  scratch_.reserve(p.local_rows() * C, MemKind::scratch);
  group_->all_to_allv(sorted, sc, sd, scratch_.data(), rc, rd, ElemType::f32,
                      std::string(label) + ": rows to experts");
  move_rows(local, scratch_.data(), p, C, true);
}

void ExpertDispatch::from_experts(float* sorted, const float* local, const RoutePlan& p, int64_t C,
                                  std::string_view label) const {
  if (!distributed()) {
    copy_bytes(sorted, local, p.rows() * C * int64_t{sizeof(float)});
    return;
  }
  std::vector<int64_t> sc, sd, rc, rd;
  element_blocks(p.recv_rows, C, sc, sd);
  element_blocks(p.send_rows, C, rc, rd);
  scratch_.reserve(p.local_rows() * C, MemKind::scratch);
  move_rows(scratch_.data(), local, p, C, false);
  group_->all_to_allv(scratch_.data(), sc, sd, sorted, rc, rd, ElemType::f32,
                      std::string(label) + ": rows from experts");
}

}  // namespace mt::ep
