// The Llama decoder, forward and backward written out per block (llm.c style):
//
//   x₀ = embed(ids)
//   for each layer l:  a = x + o_proj(attn(rope(qkv(rmsnorm₁(x)))))
//                      x = a + down(swiglu(gate_up(rmsnorm₂(a))))
//   logits = lm_head(rmsnorm_f(x_L));  loss = Σ_valid CE(logits, targets) / n_valid_global
//
// The model owns its parameters, gradients (both flat, see params.h) and the
// activations of one microbatch of at most max_batch × max_seq tokens. With
// recomputation, a layer keeps only its input and recomputes the rest in its
// backward with the same kernels on the same inputs: bitwise the same result.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/params.h"
#include "ops/rope.h"
#include "parallel/store.h"

namespace mt {

inline constexpr int32_t kIgnoreIndex = -1;

// Time spent per kernel family, for the benchmark's breakdown.
enum class Kernel : int { gemm, attention, rmsnorm, rope, swiglu, embedding, cross_entropy, other, count_ };
const char* kernel_name(Kernel k);
struct KernelTimes {
  std::array<double, static_cast<int>(Kernel::count_)> seconds{};
  void clear() { seconds.fill(0.0); }
};

struct ModelOptions {
  int64_t max_batch = 1;  // sequences per microbatch
  int64_t max_seq = 0;    // tokens per sequence (≤ max_seq_len); 0 means max_seq_len
  bool recompute = false;
  bool profile = false;  // fill kernel_times() (adds a clock read per kernel)
};

class Llama {
 public:
  // With no store, the model keeps its parameters and gradients itself
  // (LocalStore: one process). A distributed run passes the store of its layout.
  Llama(const ModelConfig& cfg, const ModelOptions& opts, std::unique_ptr<ParamStore> store = nullptr);
  ~Llama();
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ParamTable& param_table() const { return table_; }
  const std::vector<UnitSpec>& units() const { return units_; }
  ParamStore& store() { return *store_; }
  int64_t num_params() const { return table_.total; }

  // This rank's share of the parameters and gradients. For a model with its own
  // LocalStore that is the whole flat buffer, indexed by ParamSpec::offset.
  float* params() { return store_->local_params(); }
  const float* params() const { return store_->local_params(); }
  float* grads() { return store_->local_grads(); }

  // Initialisation by the pure rule of params.h; every rank generates only what it owns.
  void init(uint64_t seed);
  void zero_grads() { store_->begin_step(1); }

  // Forward of B sequences of T tokens (inputs, targets [B, T]; targets may hold
  // kIgnoreIndex). Returns the SUM of the valid tokens' losses (in double); the
  // caller divides by the global valid-token count. targets may be null: then
  // only the logits are computed (returns 0).
  double forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T);

  // Backward of the last forward: accumulates parameter gradients (+=) for the
  // loss Σ_valid CE · dloss, where dloss = 1 / (global valid-token count).
  void backward(float dloss);

  // Logits [B, T, V] of the last forward (valid until backward, which reuses them).
  const float* logits() const;

  const KernelTimes& kernel_times() const { return times_; }
  KernelTimes& kernel_times() { return times_; }

 private:
  struct LayerActs;
  struct Buffers;

  // P: the layer's unit parameters (unit-relative offsets in rel_[l]).
  // x_out may be null (recomputation): the layer output is then not computed.
  void layer_forward(int64_t l, const float* P, LayerActs& a, const float* x_in, float* x_out);
  void layer_backward(int64_t l, const float* P, float* G, LayerActs& a, const float* x_in, float* dres);
  LayerActs& acts_for(int64_t l);
  int final_unit() const { return static_cast<int>(cfg_.n_layers) + 1; }

  ModelConfig cfg_;
  ModelOptions opts_;
  ParamTable table_;
  std::vector<UnitSpec> units_;
  std::vector<LayerParamOffsets> rel_;   // per layer, offsets within its unit
  int64_t norm_rel_ = 0, head_rel_ = 0;  // within the final unit (head: within unit 0 when tied)
  RopeTable rope_;
  std::unique_ptr<ParamStore> store_;
  std::unique_ptr<Buffers> buf_;
  KernelTimes times_;
  int64_t B_ = 0, T_ = 0;  // shape of the last forward
  const int32_t* targets_ = nullptr;
};

}  // namespace mt
