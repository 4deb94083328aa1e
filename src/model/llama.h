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
  Llama(const ModelConfig& cfg, const ModelOptions& opts);
  ~Llama();
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ParamTable& param_table() const { return table_; }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  int64_t num_params() const { return table_.total; }

  void init(uint64_t seed) { init_params(params_.data(), table_, cfg_, seed); }
  void zero_grads() { grads_.zero(); }

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

  // x_out may be null (recomputation): the layer output is then not computed.
  void layer_forward(int64_t l, LayerActs& a, const float* x_in, float* x_out);
  void layer_backward(int64_t l, LayerActs& a, const float* x_in, float* dres);
  LayerActs& acts_for(int64_t l);

  ModelConfig cfg_;
  ModelOptions opts_;
  ParamTable table_;
  RopeTable rope_;
  Tensor params_, grads_;
  std::unique_ptr<Buffers> buf_;
  KernelTimes times_;
  int64_t B_ = 0, T_ = 0;  // shape of the last forward
  const int32_t* targets_ = nullptr;
};

}  // namespace mt
