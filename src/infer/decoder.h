// The model's forward for generation, one step at a time against a KV cache:
// each step takes, for some sequences of the batch, their next n tokens
// (a prompt chunk, or the one token just sampled), appends their keys and
// values to the cache and returns logits. The rows of all sequences go
// through each GEMM together; attention runs per sequence, its queries at
// positions [len, len + n) against the cached keys [0, len + n).
//
// It runs this rank's part of the model as the training forward holds it
// (src/model): under tensor parallelism its query and kv heads (one
// replicated kv head when tp > n_kv_heads) and its ffn features, with the
// row-parallel o and down layers all-reducing over tp (parallel/
// tensor_parallel.h), the vocab-parallel embedding, and the LM head's rows of
// this rank's vocabulary: the logits stay sharded (sampling.h picks the token
// without gathering them). Under pipeline parallelism it runs its stage's
// layers: the first stage reads token ids, the others the previous stage's
// hidden state. Under context parallelism (a cp group) the cache is sharded by
// position (kv_cache.h) and the step is split over cp by rows: each cp rank
// runs the norms, GEMMs and SwiGLU of its block of the step's rows, and the
// hidden state is all-gathered at the end of the stage. Attention, by the
// step's kind and cp_impl (docs/MODEL.md, "Generation"):
//   ring (cp_impl ring, a step with a prompt chunk: some entry n > 1): each cp
//     rank keeps its block's q and passes a packet around the cp ring
//     (rank → rank+1, cp−1 hops, the next in flight while the current one is
//     attended): rank s's packet holds, per entry, the k|v of its cached
//     positions and of its block's new rows. Each rank attends its queries to
//     every packet, merges by log-sum-exp (ops/attention.h attention_merge)
//     and caches the new positions of its shard as they pass. No rank holds
//     every row's q|k|v.
//   all-gather (cp_impl allgather, or a decode step of one row per sequence):
//     the q|k|v rows are all-gathered, each cp rank attends every row to the
//     positions it caches, and the partial outputs and log-sum-exps are
//     all-gathered and merged in cp rank order.
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
#include "infer/kv_cache.h"
#include "model/llama.h"
#include "parallel/context_parallel.h"
#include "parallel/vocab_parallel.h"

namespace mt {

struct DecodeRows {
  int64_t seq = 0;  // the sequence's index in the cache's batch
  const int32_t* ids = nullptr;
  int64_t n = 0;  // tokens, at positions [cache.length(seq), + n)
};

class Decoder {
 public:
  // ConfigError unless the model is dense and the cache's layers, kv heads
  // and head_dim are this rank's (its stage's layers, its tp share of the kv
  // heads), and the cache's shards are cp's size (cp null: one shard).
  // cp_impl chooses the prefill's attention under cp (above).
  Decoder(const Llama& model, KvCache& cache, Group* cp = nullptr, cp::CpImpl cp_impl = cp::CpImpl::ring);

  // One step of this stage. The first stage reads the entries' ids, any other
  // `hidden` [Σ n, C], the previous stage's output. The last stage writes into
  // `out` the logits of its vocabulary shard [rows, vocab().rows] (rows: one per
  // entry, its last token, or with all_logits Σ n); any other stage writes its
  // output hidden state [Σ n, C]. Advances each sequence's cache length by n.
  void stage_step(std::span<const DecodeRows> entries, const float* hidden, float* out,
                  bool all_logits = false);
  // The whole model in one process: logits [entries, V] (all_logits: [Σ n, V]).
  void step(std::span<const DecodeRows> entries, float* logits, bool all_logits = false) {
    stage_step(entries, nullptr, logits, all_logits);
  }

  // This rank's columns of the logits (the whole vocabulary without tp).
  const tp::VocabShard& vocab() const { return vocab_; }

 private:
  // v grown to at least n elements; its data.
  template <typename T>
  static T* sized(std::vector<T>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
    return v.data();
  }
  void embed();
  void layer(int64_t l, std::span<const DecodeRows> entries);
  void attend(int64_t l, const DecodeRows& e, int64_t r0);
  void merge_over_cp(std::span<const DecodeRows> entries);
  // The ring form (ring_prefill.cpp): qkv is this rank's block [mb_, QKV].
  struct Rows {
    int64_t a = 0, b = 0;  // rows [a, b) of the step
    int64_t n() const { return b > a ? b - a : 0; }
  };
  Rows block_rows(int s) const;
  Rows entry_rows(size_t i, Rows within) const;
  int64_t packet_floats(std::span<const DecodeRows> entries, int s) const;
  void pack_packet(int64_t l, std::span<const DecodeRows> entries, const float* qkv, float* out);
  void attend_packet(int64_t l, std::span<const DecodeRows> entries, const float* qkv, const float* packet,
                     int s);
  void ring_attention(int64_t l, std::span<const DecodeRows> entries, float* qkv);
  void head(std::span<const DecodeRows> entries, float* logits, bool all_logits);
  const RopeTable& rope_for(int64_t seq_len);

  const Llama& model_;
  KvCache& cache_;
  Group* cp_ = nullptr;  // null: the whole cache here
  cp::CpImpl cp_impl_ = cp::CpImpl::ring;
  bool ring_ = false;  // this step's attention goes around the cp ring
  ModelConfig cfg_;
  TpDims td_;
  tp::VocabShard vocab_;
  RopeScaling scaling_;
  bool rotate_at_attention_ = false;  // dynamic scaling: keys cached before rotation
  RopeTable rope_;                    // frequencies independent of the length (all but dynamic)
  RopeTable rope_len_;                // dynamic: those of the current entry's length
  int64_t M_ = 0;                     // rows of the current step
  // Under cp this rank's block of them, rows [m0_, m0_ + mb_) (mp_ = ceil(M / cp)
  // rows per rank): the norms, GEMMs and SwiGLU run on the block, the residual
  // stream x_ holds it between layers; without cp the block is all M rows.
  int64_t m0_ = 0, mb_ = 0, mp_ = 0;
  // All-gathers each cp rank's block of `src` [mb_, width] into dst [M_, width].
  void gather_blocks(const float* src, int64_t width, std::vector<float>& dst, const char* label);
  std::vector<float> x_, ln_, rstd_, qkv_, att_, mid_, gu_, h_, lse_, kbuf_, vbuf_, krot_, part_, gathered_;
  std::vector<int32_t> ids_, pos_, kpos_, ring_pos_;
  std::vector<int64_t> e0_;  // each entry's first row in the step
  std::vector<float> packet_[2], ring_keys_, part_out_, part_lse_;
};

}  // namespace mt
