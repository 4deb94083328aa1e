#include "infer/generate.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "infer/decoder.h"
#include "model/params.h"

namespace mt {

const char* stop_name(StopReason r) {
  return r == StopReason::eos ? "eos" : "length";
}

int64_t generation_capacity(const ModelConfig& cfg, const std::vector<std::vector<int32_t>>& prompts,
                            int64_t first_index, int64_t max_new) {
  int64_t cap = 1;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t P = static_cast<int64_t>(prompts[i].size());
    const int64_t index = first_index + static_cast<int64_t>(i);
    MT_REQUIRE(P > 0, ConfigError, "prompt ", index, " is empty: generation needs at least one token");
    const int64_t need = P + std::max<int64_t>(max_new - 1, 0);
    MT_REQUIRE(need <= cfg.max_seq_len, ConfigError, "prompt ", index, " has ", P,
               " tokens; with --max-new-tokens ", max_new, " the KV cache needs ", need,
               " positions but the model's max_seq_len is ", cfg.max_seq_len);
    cap = std::max(cap, need);
  }
  return cap;
}

namespace {

bool on(Group* g) {
  return g != nullptr && g->size() > 1;
}

// One decode step of the whole pipeline, seen from this rank's stage: the
// hidden state in from the previous stage, out to the next; on the last stage
// the tokens of the rows in `wanted` chosen; then those choices broadcast from
// the last stage to every stage.
class PipelineStep {
 public:
  PipelineStep(const Llama& model, KvCache& cache, const GenerateLayout& layout, const GenerateOptions& opts,
               int64_t first_index)
      : model_(model),
        cache_(cache),
        dec_(model, cache, layout.cp),
        pp_(on(layout.pp) ? layout.pp : nullptr),
        opts_(opts),
        first_index_(first_index) {}

  // picked[i]: row i's choice (its token −1 when row i was not wanted).
  void run(const std::vector<DecodeRows>& rows, const std::vector<bool>& wanted,
           std::vector<Sampled>& picked) {
    const int64_t C = model_.config().d_model, R = static_cast<int64_t>(rows.size());
    int64_t M = 0;
    for (const DecodeRows& e : rows)
      M += e.n;
    const int me = pp_ != nullptr ? pp_->rank() : 0, last = pp_ != nullptr ? pp_->size() - 1 : 0;
    if (!model_.has_embed()) {
      hidden_.resize(static_cast<size_t>(M * C));
      pp_->recv(hidden_.data(), M * C, ElemType::f32, me - 1, 0, "generate stage input");
    }
    out_.resize(static_cast<size_t>(model_.has_head() ? R * dec_.vocab().rows : M * C));
    dec_.stage_step(rows, hidden_.data(), out_.data());
    if (!model_.has_head()) pp_->send(out_.data(), M * C, ElemType::f32, me + 1, 0, "generate stage output");
    std::vector<double> choice(static_cast<size_t>(2 * R), -1.0);  // (token, logprob) per row
    if (model_.has_head()) {
      const tp::VocabShard& v = dec_.vocab();
      for (int64_t i = 0; i < R; ++i) {
        if (!wanted[static_cast<size_t>(i)]) continue;
        const DecodeRows& e = rows[static_cast<size_t>(i)];
        const LogitsShard row{out_.data() + i * v.rows, v.begin, v.end, model_.config().vocab_size};
        const Sampled s =
            sample_token(row, model_.tp_group(), opts_.sampling, first_index_ + e.seq, cache_.length(e.seq));
        choice[static_cast<size_t>(2 * i)] = s.token;
        choice[static_cast<size_t>(2 * i + 1)] = s.logprob;
      }
    }
    if (pp_ != nullptr) pp_->broadcast(choice.data(), 2 * R, ElemType::f64, last, "generate tokens");
    picked.resize(static_cast<size_t>(R));
    for (int64_t i = 0; i < R; ++i)
      picked[static_cast<size_t>(i)] = {static_cast<int32_t>(choice[static_cast<size_t>(2 * i)]),
                                        choice[static_cast<size_t>(2 * i + 1)]};
  }

 private:
  const Llama& model_;
  KvCache& cache_;
  Decoder dec_;
  Group* pp_;
  const GenerateOptions& opts_;
  int64_t first_index_;
  std::vector<float> hidden_, out_;
};

void check_options(const GenerateOptions& opts) {
  check_sampling(opts.sampling);
  MT_REQUIRE(opts.max_new_tokens >= 0, ConfigError, "--max-new-tokens (", opts.max_new_tokens,
             ") must not be negative");
  MT_REQUIRE(opts.prefill_chunk >= 0, ConfigError, "--prefill-chunk (", opts.prefill_chunk,
             ") must be 0 (whole prompt) or positive");
}

}  // namespace

std::vector<Generation> generate(const Llama& model, const std::vector<std::vector<int32_t>>& prompts,
                                 int64_t first_index, const GenerateOptions& opts, GenerateStats* stats,
                                 const std::function<void(int64_t, int32_t)>& on_token,
                                 const GenerateLayout& layout) {
  check_options(opts);
  const ModelConfig& cfg = model.config();
  const int64_t B = static_cast<int64_t>(prompts.size());
  const int64_t cap = generation_capacity(cfg, prompts, first_index, opts.max_new_tokens);
  std::vector<Generation> out(static_cast<size_t>(B));
  GenerateStats st;
  if (B == 0 || opts.max_new_tokens == 0) {
    if (stats != nullptr) *stats = st;
    return out;
  }
  const TpDims td = tp_dims(cfg, model.tp_rank());
  const int cp = on(layout.cp) ? layout.cp->size() : 1, cp_rank = on(layout.cp) ? layout.cp->rank() : 0;
  const int64_t layers = static_cast<int64_t>(model.param_table().layers.size());
  KvCache cache(layers, B, cap, td.kv_heads, cfg.head_dim(), opts.kv_dtype, cp, cp_rank);
  st = {cache.bytes(), cap, layers, cache.slots(), td.kv_heads, B};
  PipelineStep step(model, cache, layout, opts, first_index);
  std::vector<bool> running(static_cast<size_t>(B), true);
  std::vector<int32_t> last(static_cast<size_t>(B));
  // Sequence b's chosen token: stop it at EOS or the length.
  auto take = [&](int64_t b, const Sampled& s) {
    Generation& g = out[static_cast<size_t>(b)];
    if (s.token == opts.eos_id) {
      g.stop = StopReason::eos;
      running[static_cast<size_t>(b)] = false;
      return;
    }
    g.tokens.push_back(s.token);
    g.logprobs.push_back(s.logprob);
    last[static_cast<size_t>(b)] = s.token;
    if (on_token) on_token(first_index + b, s.token);
    if (static_cast<int64_t>(g.tokens.size()) == opts.max_new_tokens) running[static_cast<size_t>(b)] = false;
  };
  std::vector<Sampled> picked;
  Timer prefill_timer;
  const int64_t chunk = opts.prefill_chunk > 0 ? opts.prefill_chunk : cap;
  for (;;) {  // prefill: a chunk of every unfinished prompt per step
    std::vector<DecodeRows> rows;
    std::vector<bool> ends;  // whether the chunk ends its prompt (a token is chosen after it)
    for (int64_t b = 0; b < B; ++b) {
      const auto& p = prompts[static_cast<size_t>(b)];
      const int64_t done = cache.length(b), P = static_cast<int64_t>(p.size());
      if (done >= P) continue;
      rows.push_back({b, p.data() + done, std::min(chunk, P - done)});
      ends.push_back(done + rows.back().n == P);
    }
    if (rows.empty()) break;
    step.run(rows, ends, picked);
    for (size_t i = 0; i < rows.size(); ++i) {
      st.prefill_tokens += rows[i].n;
      if (ends[i]) take(rows[i].seq, picked[i]);
    }
  }
  st.prefill_s = prefill_timer.seconds();
  Timer decode_timer;
  for (;;) {  // decode: the last token of every running sequence, one step each
    std::vector<DecodeRows> rows;
    for (int64_t b = 0; b < B; ++b)
      if (running[static_cast<size_t>(b)]) rows.push_back({b, &last[static_cast<size_t>(b)], 1});
    if (rows.empty()) break;
    step.run(rows, std::vector<bool>(rows.size(), true), picked);
    st.decode_tokens += static_cast<int64_t>(rows.size());
    for (size_t i = 0; i < rows.size(); ++i)
      take(rows[i].seq, picked[i]);
  }
  st.decode_s = decode_timer.seconds();
  if (stats != nullptr) *stats = st;
  return out;
}

}  // namespace mt
