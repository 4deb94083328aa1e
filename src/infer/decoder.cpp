#include "infer/decoder.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace mt {

Decoder::Decoder(Llama& model, KvCache& cache, Group* cp, cp::CpImpl cp_impl)
    : model_(model),
      cache_(cache),
      cp_(cp != nullptr && cp->size() > 1 ? cp : nullptr),
      cfg_(model.config()),
      vocab_(tp::vocab_shard(cfg_.vocab_size, model.tp_rank().size, model.tp_rank().rank)),
      attention_(cfg_, tp_dims(cfg_, model.tp_rank()), cache, cp_, cp_impl) {
  model.check_generation();
  const TpDims td = tp_dims(cfg_, model.tp_rank());
  const int64_t layers = static_cast<int64_t>(model.param_table().layers.size());
  MT_REQUIRE(cache.row() == td.kv_heads * cfg_.head_dim(), ConfigError, "the KV cache's rows (", cache.row(),
             " floats) are not this rank's kv heads × head_dim (", td.kv_heads * cfg_.head_dim(), ")");
  MT_REQUIRE(cache.layers() == layers, ConfigError, "the KV cache has ", cache.layers(),
             " layers but this stage runs ", layers);
  MT_REQUIRE(cache.shards() == (cp_ != nullptr ? cp_->size() : 1), ConfigError, "the KV cache has ",
             cache.shards(), " position shards but cp has ", cp_ != nullptr ? cp_->size() : 1, " ranks");
  MT_REQUIRE(cache.capacity() <= cfg_.max_seq_len, ConfigError, "the KV cache's capacity (", cache.capacity(),
             ") exceeds the model's max_seq_len (", cfg_.max_seq_len, ")");
  const bool host = run_allocator().device() == kHost;
  MT_REQUIRE(host || cp_ == nullptr, ConfigError, "generate --device ", device_name(run_allocator().device()),
             " does not cover context parallelism (--cp ", cp_ != nullptr ? cp_->size() : 1,
             "): its blocks are moved and merged on the host; use --device cpu");
  MT_REQUIRE(host || cache.dtype() == KvDtype::f32, ConfigError, "generate --device ",
             device_name(run_allocator().device()),
             " does not cover --kv-cache int8: the cache quantises on the host; use --kv-cache f32");
}

namespace {
// v grown to at least n elements (contents not kept); its data.
float* sized(DeviceArray<float>& v, int64_t n) {
  v.reserve(n, MemKind::activation);
  return v.data();
}
}  // namespace

void Decoder::stage_step(std::span<const DecodeRows> entries, const float* hidden, float* out,
                         bool all_logits) {
  const int64_t C = cfg_.d_model;
  ids_.clear();
  for (const DecodeRows& e : entries) {
    MT_REQUIRE(e.n >= 1 && e.seq >= 0 && e.seq < cache_.batch(), ConfigError, "decode step: sequence ", e.seq,
               " with ", e.n, " tokens is not in the batch of ", cache_.batch());
    cache_.check_room(e.seq, e.n);
    for (int64_t i = 0; i < e.n; ++i) {
      MT_REQUIRE(e.ids[i] >= 0 && e.ids[i] < cfg_.vocab_size, ConfigError, "token id ", e.ids[i],
                 " is outside the model's ", cfg_.vocab_size, "-token vocabulary");
      ids_.push_back(e.ids[i]);
    }
  }
  attention_.begin_step(entries);
  const int64_t M = attention_.rows(), m0 = attention_.block_first(), mb = attention_.block_size();
  float* x = sized(x_, std::max<int64_t>(M, 1) * C);
  if (model_.has_embed()) {
    ids_dev_.mirror(ids_, "tokens", MemKind::activation);
    model_.decode_embed(x, ids_dev_.data(), M);
  } else {
    MT_CHECK(hidden != nullptr, "a stage without the embedding reads the previous stage's hidden state");
    copy_from_host(x, hidden, M * C * int64_t{sizeof(float)}, "generate hidden");
  }
  if (m0 > 0 && mb > 0)  // this rank's block to the front of the residual stream (cp: the host device)
    std::memmove(x, x + m0 * C, static_cast<size_t>(mb * C) * sizeof(float));
  model_.decode_layers(x, attention_.positions() + m0, mb, attention_);
  for (const DecodeRows& e : entries)
    cache_.advance(e.seq, e.n);
  if (cp_ != nullptr) {  // every row's hidden state on every cp rank, for the head or the next stage
    std::vector<float> block(x, x + mb * C), all;
    attention_.gather_blocks(block.data(), C, all, "generate cp hidden");
    std::copy(all.begin(), all.begin() + M * C, x);
  }
  if (model_.has_head()) {
    head(entries, out, all_logits);
  } else {
    copy_to_host(out, x, M * C * int64_t{sizeof(float)}, "generate hidden");
  }
}

// The rows whose logits are asked for, through the model's final norm and
// head; the logits cross to the host for sampling.
void Decoder::head(std::span<const DecodeRows> entries, float* logits, bool all_logits) {
  const int64_t C = cfg_.d_model;
  std::vector<int64_t> rows;
  int64_t r = 0;
  for (const DecodeRows& e : entries) {
    for (int64_t i = all_logits ? 0 : e.n - 1; i < e.n; ++i)
      rows.push_back(r + i);
    r += e.n;
  }
  const int64_t R = static_cast<int64_t>(rows.size()), bytes = C * int64_t{sizeof(float)};
  float* sel = sized(sel_, R * C);
  for (int64_t i = 0; i < R; ++i)
    copy_bytes(sel + i * C, x_.data() + rows[static_cast<size_t>(i)] * C, bytes);
  float* dev = sized(logits_, R * vocab_.rows);
  model_.decode_head(dev, sel, R);
  copy_to_host(logits, dev, R * vocab_.rows * int64_t{sizeof(float)}, "logits");
}

}  // namespace mt
