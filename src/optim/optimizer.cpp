#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/exact_sum.h"
#include "ops/primitives.h"
#include "optim/clip.h"

namespace mt {

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "adamw") return OptimizerKind::adamw;
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "lamb") return OptimizerKind::lamb;
  MT_THROW(ConfigError, "train.optimizer '", name, "' must be adamw, sgd or lamb");
}

int optimizer_state_count(OptimizerKind kind, double momentum) {
  return kind != OptimizerKind::sgd ? 2 : momentum != 0 ? 1 : 0;
}

double lamb_trust_ratio(double param_sq, double update_sq) {
  return param_sq > 0 && update_sq > 0 ? std::sqrt(param_sq) / std::sqrt(update_sq) : 1.0;
}

Optimizer::Optimizer(int64_t n, const OptimizerOptions& opts, std::vector<DecayRange> ranges,
                     std::vector<TensorPiece> pieces, int64_t n_tensors)
    : n_(n), opts_(opts), ranges_(std::move(ranges)), pieces_(std::move(pieces)), n_tensors_(n_tensors) {
  int64_t covered = 0;
  for (const auto& r : ranges_) {
    MT_CHECK(r.offset == covered, "decay ranges must tile the buffer in order");
    covered += r.numel;
  }
  MT_CHECK(covered == n_, "decay ranges cover ", covered, " of ", n_, " elements");
  if (opts_.kind == OptimizerKind::lamb) {
    covered = 0;
    for (const auto& p : pieces_) {
      MT_CHECK(p.offset == covered, "LAMB's tensor pieces must tile the buffer in order");
      MT_CHECK(p.tensor < n_tensors_, "tensor ", p.tensor, " of ", n_tensors_);
      covered += p.numel;
    }
    MT_CHECK(covered == n_, "LAMB's tensor pieces cover ", covered, " of ", n_, " elements");
  }
  const int count = optimizer_state_count(opts_.kind, opts_.momentum);
  for (int k = 0; k < count; ++k)
    state_.emplace_back(std::vector<int64_t>{n}, MemKind::optim);
}

const char* Optimizer::state_suffix(int k) const {
  MT_CHECK(k >= 0 && k < state_count(), "optimizer state ", k, " of ", state_count());
  if (opts_.kind == OptimizerKind::sgd) return ".momentum_buffer";
  return k == 0 ? ".exp_avg" : ".exp_avg_sq";
}

void Optimizer::step(float* params, float* grads, double lr, const NormReducer& reduce,
                     const WordReducer& reduce_words) {
  ++t_;
  if (opts_.kind == OptimizerKind::lamb) {
    lamb_step(params, grads, lr, reduce, reduce_words);
    return;
  }
  const AdamWOptions& a = opts_.adam;
  for (const auto& r : ranges_) {
    const double wd = r.decay ? a.weight_decay : 0.0;
    if (opts_.kind == OptimizerKind::adamw) {
      adamw_update(params + r.offset, grads + r.offset, state_[0].data() + r.offset,
                   state_[1].data() + r.offset, r.numel, lr, a.beta1, a.beta2, a.eps, wd, t_);
    } else {
      float* buf = state_.empty() ? nullptr : state_[0].data() + r.offset;
      sgd_update(params + r.offset, grads + r.offset, buf, r.numel, lr, opts_.momentum, opts_.nesterov, wd);
    }
  }
}

std::vector<double> Optimizer::lamb_sums(const float* params, const float* grads,
                                         const NormReducer& reduce) const {
  std::vector<double> sums(static_cast<size_t>(2 * n_tensors_), 0.0);
  for (const TensorPiece& p : pieces_) {
    if (p.tensor < 0 || !p.counted) continue;
    sums[static_cast<size_t>(2 * p.tensor)] += sum_squares(params + p.offset, p.numel);
    sums[static_cast<size_t>(2 * p.tensor + 1)] += sum_squares(grads + p.offset, p.numel);
  }
  if (reduce && n_tensors_ > 0) reduce(sums.data(), 2 * n_tensors_);
  return sums;
}

std::vector<double> Optimizer::lamb_exact_sums(const float* params, const float* grads,
                                               const WordReducer& reduce_words) const {
  std::vector<ExactSum> exact(static_cast<size_t>(2 * n_tensors_));
  for (const TensorPiece& p : pieces_) {
    if (p.tensor < 0 || !p.counted) continue;
    exact_sum_squares(exact[static_cast<size_t>(2 * p.tensor)], params + p.offset, p.numel);
    exact_sum_squares(exact[static_cast<size_t>(2 * p.tensor + 1)], grads + p.offset, p.numel);
  }
  constexpr int64_t W = ExactSum::kWords;
  std::vector<int64_t> words(exact.size() * static_cast<size_t>(W));
  for (size_t i = 0; i < exact.size(); ++i)
    std::copy(exact[i].words(), exact[i].words() + W, words.begin() + static_cast<int64_t>(i) * W);
  if (reduce_words && n_tensors_ > 0) reduce_words(words.data(), static_cast<int64_t>(words.size()));
  std::vector<double> sums(exact.size());
  for (size_t i = 0; i < exact.size(); ++i) {
    std::copy(words.begin() + static_cast<int64_t>(i) * W, words.begin() + static_cast<int64_t>(i + 1) * W,
              exact[i].words());
    exact[i].normalise();
    sums[i] = exact[i].value();
  }
  return sums;
}

void Optimizer::lamb_step(float* params, float* grads, double lr, const NormReducer& reduce,
                          const WordReducer& reduce_words) {
  const AdamWOptions& a = opts_.adam;
  for (const auto& r : ranges_) {
    lamb_direction(params + r.offset, grads + r.offset, state_[0].data() + r.offset,
                   state_[1].data() + r.offset, r.numel, a.beta1, a.beta2, a.eps,
                   r.decay ? a.weight_decay : 0.0, t_);
  }
  // Σθ² and Σr² of each tensor's pieces here, then over its other pieces.
  const std::vector<double> sums =
      opts_.exact_norms ? lamb_exact_sums(params, grads, reduce_words) : lamb_sums(params, grads, reduce);
  for (const TensorPiece& p : pieces_) {
    const double trust = p.tensor < 0 ? 1.0
                                      : lamb_trust_ratio(sums[static_cast<size_t>(2 * p.tensor)],
                                                         sums[static_cast<size_t>(2 * p.tensor + 1)]);
    const float scale = static_cast<float>(lr * trust);
    axpy(params + p.offset, -scale, grads + p.offset, p.numel);  // w − s·u, exactly w + (−s)·u
  }
}

}  // namespace mt
