// Generation's attention strategy (parallel/attention_strategy.h): the one the
// model's layers call while decoding (model/llama_decode.cpp, driven by
// decoder.h). Each step takes, for some sequences of the batch, their next n
// tokens; the layer hands it the step's q|k|v rows (under cp this rank's block
// of them), and it rotates them, appends their keys and values to the KV cache
// and attends each sequence's queries, at positions [len, len + n), to its
// cached keys [0, len + n). Attention runs per sequence; the rows of all
// sequences went through each GEMM together.
//
// Under context parallelism (a cp group) the cache is sharded by position
// (kv_cache.h) and the step's rows are split over cp in blocks (each cp rank
// runs the norms, GEMMs and SwiGLU of its block). Attention, by the step's
// kind and cp_impl (docs/MODEL.md, "Generation"):
//   ring (cp_impl ring, a step with a prompt chunk: some entry n > 1): each cp
//     rank keeps its block's q and passes a packet around the cp ring
//     (rank → rank+1, cp−1 hops, the next in flight while the current one is
//     attended): rank s's packet holds, per entry, the k|v of its cached
//     positions and of its block's new rows. Each rank attends its queries to
//     every packet, merges by log-sum-exp (ops/attention.h attention_merge)
//     and caches the new positions of its shard as they pass. No rank holds
//     every row's q|k|v (ring_prefill.cpp).
//   all-gather (cp_impl allgather, or a decode step of one row per sequence):
//     the q|k|v rows are all-gathered, each cp rank attends every row to the
//     positions it caches, and the partial outputs and log-sum-exps are
//     all-gathered and merged in cp rank order.
// These are not the training forms of parallel/context_parallel.h: those
// attend a microbatch's zigzag rows to each other, these attend a step's rows
// to a cache sharded by position and write it as they go.
//
// RoPE: keys are cached after rotation, except under dynamic scaling, whose
// frequencies depend on the sequence length L: there keys are cached before
// rotation and all L are rotated with L's frequencies at each step, as a full
// forward over the L tokens rotates them (docs/MODEL.md says what still differs).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/group.h"
#include "core/device_mirror.h"
#include "infer/kv_cache.h"
#include "model/config.h"
#include "model/params.h"
#include "parallel/attention_strategy.h"
#include "parallel/context_parallel.h"

namespace mt {

struct DecodeRows {
  int64_t seq = 0;  // the sequence's index in the cache's batch
  const int32_t* ids = nullptr;
  int64_t n = 0;  // tokens, at positions [cache.length(seq), + n)
};

class KvAttention final : public AttentionStrategy {
 public:
  // td: this rank's heads (its tp share); cp null: the whole cache here.
  KvAttention(const ModelConfig& cfg, const TpDims& td, KvCache& cache, Group* cp, cp::CpImpl cp_impl);

  // The step's entries (valid until the step ends): their rows in order, each
  // row's position, this cp rank's block and the form of its attention.
  void begin_step(std::span<const DecodeRows> entries);
  int64_t rows() const { return M_; }          // of the step
  int64_t block_first() const { return m0_; }  // this rank's block: rows [m0, m0 + mb)
  int64_t block_size() const { return mb_; }
  const int32_t* positions() const { return pos_.data(); }  // [rows()]
  // All-gathers each cp rank's block of `src` [mb, width] into dst [M, width].
  void gather_blocks(const float* src, int64_t width, std::vector<float>& dst, const char* label);

  // The block's q (and k, unless cached unrotated) by each entry's table; `pos` and `rope` are unused.
  void rotate(float* qkv, const int32_t* pos, const RopeTable& rope, int64_t N, int64_t H, int64_t KV,
              int64_t QKV) override;
  // q (the block's q|k|v rows, rotated) → out [mb, H·D], this block's rows;
  // the cache written. lse is left as it is; the positions and d are the step's own.
  void forward(int64_t layer, float* out, float* lse, const float* q, const float* k, const float* v,
               const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
               std::string_view site) override;
  // Generation has no backward: an error if called.
  void backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                const float* q, const float* k, const float* v, const int32_t* q_pos, const int32_t* k_pos,
                const AttentionDims& d, std::string_view site) override;

 private:
  // v grown to at least n elements; its data.
  template <typename T>
  static T* sized(std::vector<T>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
    return v.data();
  }
  // A buffer on the run's device grown to at least n elements (its contents not kept).
  template <typename T>
  static T* sized(DeviceArray<T>& v, int64_t n) {
    v.reserve(n, MemKind::activation);
    return v.data();
  }
  void attend(int64_t l, const DecodeRows& e, int64_t r0, const float* qkv);
  void merge_over_cp();
  // The ring form (ring_prefill.cpp): qkv is this rank's block [mb_, QKV].
  struct Rows {
    int64_t a = 0, b = 0;  // rows [a, b) of the step
    int64_t n() const { return b > a ? b - a : 0; }
  };
  Rows block_rows(int s) const;
  Rows entry_rows(size_t i, Rows within) const;
  int64_t packet_floats(int s) const;
  void pack_packet(int64_t l, const float* qkv, float* out);
  void attend_packet(int64_t l, const float* qkv, const float* packet, int s);
  void ring_attention(int64_t l, const float* qkv);
  const RopeTable& rope_for(int64_t seq_len);

  KvCache& cache_;
  Group* cp_ = nullptr;  // null: the whole cache here
  cp::CpImpl cp_impl_ = cp::CpImpl::ring;
  bool ring_ = false;  // this step's attention goes around the cp ring
  ModelConfig cfg_;
  TpDims td_;
  RopeScaling scaling_;
  bool rotate_at_attention_ = false;  // dynamic scaling: keys cached before rotation
  RopeTable rope_;                    // frequencies independent of the length (all but dynamic)
  RopeTable rope_len_;                // dynamic: those of the current entry's length
  std::span<const DecodeRows> entries_;
  int64_t M_ = 0;  // rows of the current step
  // Under cp this rank's block of them, rows [m0_, m0_ + mb_) (mp_ = ceil(M / cp)
  // rows per rank); without cp the block is all M rows.
  int64_t m0_ = 0, mb_ = 0, mp_ = 0;
  std::vector<float> qkv_, kbuf_, vbuf_, gathered_;
  DeviceArray<float> att_, lse_, krot_;  // on the run's device
  std::vector<int32_t> pos_, kpos_, ring_pos_;
  // pos_ and kpos_ on the run's device, for the kernels (crossings: "positions").
  DeviceMirror<int32_t> pos_dev_, kpos_dev_;
  std::vector<int64_t> e0_;  // each entry's first row in the step
  std::vector<float> packet_[2], ring_keys_, part_out_, part_lse_;
};

}  // namespace mt
