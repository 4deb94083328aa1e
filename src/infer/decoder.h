// The model's forward for generation, one step at a time against a KV cache:
// each step takes, for some sequences of the batch, their next n tokens
// (a prompt chunk, or the one token just sampled), appends their keys and
// values to the cache and returns logits.
//
// It runs the model's own embedding, decoder blocks and head
// (model/llama_decode.cpp: Llama::layer_forward, the training layer) with the
// KV cache's attention strategy (kv_attention.h) in place of the training
// attention: this rank's part of the model as training holds it — under tensor
// parallelism its query and kv heads (one replicated kv head when tp >
// n_kv_heads) and its ffn features, the vocab-parallel embedding, and the LM
// head's rows of this rank's vocabulary: the logits stay sharded (sampling.h
// picks the token without gathering them); a mixture of experts with every
// expert on every rank. Under pipeline parallelism it runs its stage's layers:
// the first stage reads token ids, the others the previous stage's hidden
// state. Under context parallelism (a cp group) the cache is sharded by
// position (kv_cache.h) and the step is split over cp by rows: each cp rank
// runs the layers on its block of the step's rows, the attention strategy
// exchanges over cp, and the hidden state is all-gathered at the end of the
// stage.
//
// On the run's device (core/device.h) the step's activations, the KV cache and
// the positions live there; the ids cross in ("tokens"), and the outputs out:
// the logits ("logits", read by sampling on the host) or, on a stage before the
// last, its hidden state ("generate hidden", in again on the next stage). The
// fake device covers one process, tp and pp with an f32 cache; cp and the int8
// cache read device memory on the host and are refused there by name.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/group.h"
#include "core/device_mirror.h"
#include "infer/kv_attention.h"
#include "infer/kv_cache.h"
#include "model/llama.h"
#include "parallel/context_parallel.h"
#include "parallel/vocab_parallel.h"

namespace mt {

class Decoder {
 public:
  // ConfigError when the model's layout is one generation does not run
  // (Llama::check_generation), or unless the cache's layers, kv heads and
  // head_dim are this rank's (its stage's layers, its tp share of the kv
  // heads), and the cache's shards are cp's size (cp null: one shard).
  // cp_impl chooses the prefill's attention under cp (kv_attention.h).
  Decoder(Llama& model, KvCache& cache, Group* cp = nullptr, cp::CpImpl cp_impl = cp::CpImpl::ring);

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
  void head(std::span<const DecodeRows> entries, float* logits, bool all_logits);

  Llama& model_;
  KvCache& cache_;
  Group* cp_ = nullptr;  // null: the whole cache here
  ModelConfig cfg_;
  tp::VocabShard vocab_;
  KvAttention attention_;
  DeviceArray<float> x_, sel_, logits_;  // on the run's device
  std::vector<int32_t> ids_;
  DeviceMirror<int32_t> ids_dev_;
};

}  // namespace mt
