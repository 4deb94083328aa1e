// The optimizers of a training run (train.optimizer), over one rank's share of
// the flat parameter buffer (docs/MODEL.md, "Optimizer and schedule"):
//
//   adamw  optim/adamw.h's update, element by element.
//   sgd    as torch.optim.SGD (dampening 0): d = g + λθ; with momentum μ,
//          b ← μb + d and d = b (nesterov: d ← d + μb); θ ← θ − lr·d.
//   lamb   the bias-corrected Adam direction plus decoupled weight decay,
//          r = m̂ / (√v̂ + ε) + λθ, scaled per tensor by the trust ratio
//          ‖θ‖ / ‖r‖ (1 when either norm is 0): θ ← θ − lr·trust·r.
//
// AdamW and SGD are element-wise, so any sharding of the state computes the
// one-process update. LAMB's two norms are of WHOLE tensors: each rank sums
// its pieces' squares and `NormReducer` adds the sums over the ranks that
// hold the other pieces (train/train_step.cpp says which ranks those are).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "optim/adamw.h"

namespace mt {

enum class OptimizerKind { adamw, sgd, lamb };

// "adamw" | "sgd" | "lamb"; ConfigError naming the value otherwise.
OptimizerKind parse_optimizer(const std::string& name);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::adamw;
  AdamWOptions adam;      // beta1, beta2, eps, weight_decay (sgd uses weight_decay only)
  double momentum = 0;    // sgd
  bool nesterov = false;  // sgd
  // lamb: each tensor's two norms as exact sums (core/exact_sum.h), reduced as
  // integer words — the canonical mode's (parallel/canonical.h): the same bits
  // however the tensor is sharded.
  bool exact_norms = false;
};

// The state tensors an Optimizer of `kind` keeps, each as large as what it
// updates: adamw and lamb 2 (the moments), sgd 1 with momentum (its buffer),
// 0 without. The constructor allocates this many and the memory model
// (cost/memory_model.cpp) counts them, so the rule is stated once.
int optimizer_state_count(OptimizerKind kind, double momentum);

// A piece of the share that belongs to one tensor, for LAMB: [offset, offset
// + numel) of tensor `tensor` (an index every rank of the reduction agrees on;
// -1: padding of a shard, in no tensor). `counted`: this rank's squares count
// toward the tensor's norm (false on all but one of the ranks that hold the
// same copy, as ParamSlot::norm_counted).
struct TensorPiece {
  int64_t offset = 0;
  int64_t numel = 0;
  int64_t tensor = -1;
  bool counted = true;
};

// Adds v[0, n) over the ranks that hold pieces of the same tensors, in place.
using NormReducer = std::function<void(double* v, int64_t n)>;
// The same for exact sums' words (ExactSum::words, int64), with exact_norms.
using WordReducer = std::function<void(int64_t* v, int64_t n)>;

class Optimizer {
 public:
  // State for n elements; `ranges` tile [0, n) and say where weight decay
  // applies; `pieces` (LAMB only) tile it by tensors, of `n_tensors` in all.
  Optimizer(int64_t n, const OptimizerOptions& opts, std::vector<DecayRange> ranges,
            std::vector<TensorPiece> pieces = {}, int64_t n_tensors = 0);

  // One update at learning rate lr (the step count advances by one). LAMB
  // overwrites `grads` with its update direction r; `reduce` (LAMB only) may
  // be empty for a process that holds every tensor whole; with exact_norms
  // `reduce_words` takes its place.
  void step(float* params, float* grads, double lr, const NormReducer& reduce = {},
            const WordReducer& reduce_words = {});

  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  OptimizerKind kind() const { return opts_.kind; }
  // The state tensors, each n elements, as checkpoints name them after the
  // parameter: ".exp_avg", ".exp_avg_sq" (adamw, lamb), ".momentum_buffer"
  // (sgd with momentum; none without).
  int state_count() const { return static_cast<int>(state_.size()); }
  const char* state_suffix(int k) const;
  const float* state(int k) const { return state_[static_cast<size_t>(k)].data(); }
  float* state_data(int k) { return state_[static_cast<size_t>(k)].data(); }

 private:
  void lamb_step(float* params, float* grads, double lr, const NormReducer& reduce,
                 const WordReducer& reduce_words);
  // Σθ² and Σr² of each tensor (2·n_tensors values), summed over its pieces.
  std::vector<double> lamb_sums(const float* params, const float* grads, const NormReducer& reduce) const;
  std::vector<double> lamb_exact_sums(const float* params, const float* grads,
                                      const WordReducer& reduce_words) const;

  int64_t n_;
  OptimizerOptions opts_;
  std::vector<DecayRange> ranges_;
  std::vector<TensorPiece> pieces_;
  int64_t n_tensors_ = 0;
  std::vector<Tensor> state_;
  int64_t t_ = 0;
};

// LAMB's trust ratio from a tensor's Σθ² and Σr².
double lamb_trust_ratio(double param_sq, double update_sq);

}  // namespace mt
