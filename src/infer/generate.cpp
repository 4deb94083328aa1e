#include "infer/generate.h"

#include <algorithm>
#include <deque>
#include <memory>

#include "comm/context.h"
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

// Adds the sends and all-gathers on cp's axis that the ledger recorded after its first `from` entries.
void count_cp_calls(const Group& cp, size_t from, GenerateStats& st) {
  const std::vector<LedgerEntry>& all = cp.context().ledger.entries();
  for (size_t i = from; i < all.size(); ++i) {
    if (all[i].axis != cp.axis()) continue;
    st.prefill_cp_sends += all[i].op == "send";
    st.prefill_cp_gathers += all[i].op == "all_gather";
  }
}

// One step of a prompt group through the pipeline, seen from this rank's
// stage: the hidden state in from the previous stage and out to the next
// (tag: the group); on the last stage the tokens of the rows in `wanted`
// chosen and sent to every other stage without waiting (tag: kChoiceTag + the
// group), which each receives before the group's next step. So while the last
// stage finishes one group's step, the first already runs the next group's:
// with one group per stage the pipeline stays full (docs/MODEL.md, "Generation").
class PipelineStep {
 public:
  PipelineStep(Llama& model, KvCache& cache, const GenerateLayout& layout, const GenerateOptions& opts,
               int64_t first_index)
      : model_(model),
        cache_(cache),
        dec_(model, cache, layout.cp, layout.cp_impl),
        pp_(on(layout.pp) ? layout.pp : nullptr),
        opts_(opts),
        first_index_(first_index) {}
  ~PipelineStep() {
    for (Sent& s : sent_)
      s.work.wait();
  }
  PipelineStep(const PipelineStep&) = delete;
  PipelineStep& operator=(const PipelineStep&) = delete;

  bool last_stage() const { return model_.has_head(); }

  // Group g's step over `rows`; on the last stage picked[i] is row i's choice
  // (its token −1 when row i was not wanted).
  void run(int g, const std::vector<DecodeRows>& rows, const std::vector<bool>& wanted,
           std::vector<Sampled>& picked) {
    const int64_t C = model_.config().d_model, R = static_cast<int64_t>(rows.size());
    int64_t M = 0;
    for (const DecodeRows& e : rows)
      M += e.n;
    const int me = pp_ != nullptr ? pp_->rank() : 0;
    if (!model_.has_embed()) {
      hidden_.resize(static_cast<size_t>(M * C));
      pp_->recv(hidden_.data(), M * C, ElemType::f32, me - 1, g, "generate stage input");
    }
    out_.resize(static_cast<size_t>(model_.has_head() ? R * dec_.vocab().rows : M * C));
    dec_.stage_step(rows, hidden_.data(), out_.data());
    if (!model_.has_head()) {
      pp_->send(out_.data(), M * C, ElemType::f32, me + 1, g, "generate stage output");
      return;
    }
    std::vector<double> choice(static_cast<size_t>(2 * R), -1.0);  // (token, logprob) per row
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
    unpack(choice, picked);
    if (pp_ == nullptr) return;
    auto kept = std::make_shared<std::vector<double>>(std::move(choice));
    for (int s = 0; s < me; ++s) {
      sent_.push_back(
          {kept, pp_->send_async(kept->data(), 2 * R, ElemType::f64, s, kChoiceTag + g, "generate tokens")});
    }
    while (!sent_.empty() && sent_.front().work.test())  // completed sends free their buffers
      sent_.pop_front();
  }

  // A stage before the last: the choices of group g's step over R rows.
  void receive(int g, int64_t R, std::vector<Sampled>& picked) {
    std::vector<double> choice(static_cast<size_t>(2 * R));
    pp_->recv(choice.data(), 2 * R, ElemType::f64, pp_->size() - 1, kChoiceTag + g, "generate tokens");
    unpack(choice, picked);
  }

 private:
  static constexpr int kChoiceTag = 1 << 20;
  struct Sent {
    std::shared_ptr<std::vector<double>> data;
    Work work;
  };
  static void unpack(const std::vector<double>& choice, std::vector<Sampled>& picked) {
    const size_t R = choice.size() / 2;
    picked.resize(R);
    for (size_t i = 0; i < R; ++i)
      picked[i] = {static_cast<int32_t>(choice[2 * i]), choice[2 * i + 1]};
  }

  Llama& model_;
  KvCache& cache_;
  Decoder dec_;
  Group* pp_;
  const GenerateOptions& opts_;
  int64_t first_index_;
  std::vector<float> hidden_, out_;
  std::deque<Sent> sent_;
};

// The batch's sequences: their prompts, what each has generated, which still
// run and the last token of each.
class Sequences {
 public:
  Sequences(const std::vector<std::vector<int32_t>>& prompts, int64_t first_index,
            const GenerateOptions& opts, const std::function<void(int64_t, int32_t)>& on_token,
            std::vector<Generation>& out)
      : prompts_(prompts),
        first_index_(first_index),
        opts_(opts),
        on_token_(on_token),
        out_(out),
        running_(prompts.size(), true),
        last_(prompts.size()) {}

  // The rows of group g's next step (sequences b ≡ g mod G): a chunk of every
  // unfinished prompt (wanted: the chunk ends its prompt, a token is chosen
  // after it) and true; else the last token of every running sequence and
  // false; no rows when the group is done.
  bool next_rows(int g, int G, const KvCache& cache, int64_t chunk, std::vector<DecodeRows>& rows,
                 std::vector<bool>& wanted) {
    const auto B = static_cast<int64_t>(prompts_.size());
    rows.clear();
    wanted.clear();
    for (int64_t b = g; b < B; b += G) {
      const auto& p = prompts_[static_cast<size_t>(b)];
      const int64_t done = cache.length(b), P = static_cast<int64_t>(p.size());
      if (done >= P) continue;
      rows.push_back({b, p.data() + done, std::min(chunk, P - done)});
      wanted.push_back(done + rows.back().n == P);
    }
    if (!rows.empty()) return true;
    for (int64_t b = g; b < B; b += G) {
      if (!running_[static_cast<size_t>(b)]) continue;
      rows.push_back({b, &last_[static_cast<size_t>(b)], 1});
      wanted.push_back(true);
    }
    return false;
  }

  // The chosen tokens of a step's wanted rows.
  void apply(const std::vector<DecodeRows>& rows, const std::vector<bool>& wanted,
             const std::vector<Sampled>& picked) {
    for (size_t i = 0; i < rows.size(); ++i)
      if (wanted[i]) take(rows[i].seq, picked[i]);
  }

 private:
  // Sequence b's chosen token: stop it at EOS or the length.
  void take(int64_t b, const Sampled& s) {
    Generation& g = out_[static_cast<size_t>(b)];
    if (s.token == opts_.eos_id) {
      g.stop = StopReason::eos;
      running_[static_cast<size_t>(b)] = false;
      return;
    }
    g.tokens.push_back(s.token);
    g.logprobs.push_back(s.logprob);
    last_[static_cast<size_t>(b)] = s.token;
    if (on_token_) on_token_(first_index_ + b, s.token);
    if (static_cast<int64_t>(g.tokens.size()) == opts_.max_new_tokens)
      running_[static_cast<size_t>(b)] = false;
  }

  const std::vector<std::vector<int32_t>>& prompts_;
  int64_t first_index_;
  const GenerateOptions& opts_;
  const std::function<void(int64_t, int32_t)>& on_token_;
  std::vector<Generation>& out_;
  std::vector<bool> running_;
  std::vector<int32_t> last_;
};

}  // namespace

void check_generate_options(const GenerateOptions& opts) {
  check_sampling(opts.sampling);
  MT_REQUIRE(opts.max_new_tokens >= 0, ConfigError, "--max-new-tokens (", opts.max_new_tokens,
             ") must not be negative");
  MT_REQUIRE(opts.prefill_chunk >= 0, ConfigError, "--prefill-chunk (", opts.prefill_chunk,
             ") must be 0 (whole prompt) or positive");
}

int64_t generation_kv_bytes(const ModelConfig& cfg, TpRank tp, int64_t layers, int64_t batch,
                            int64_t capacity, KvDtype dtype, int cp) {
  return KvCache::bytes_for(layers, batch, (capacity + cp - 1) / cp, tp_dims(cfg, tp).kv_heads,
                            cfg.head_dim(), dtype);
}

std::vector<Generation> generate(Llama& model, const std::vector<std::vector<int32_t>>& prompts,
                                 int64_t first_index, const GenerateOptions& opts, GenerateStats* stats,
                                 const std::function<void(int64_t, int32_t)>& on_token,
                                 const GenerateLayout& layout) {
  check_generate_options(opts);
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
  const int64_t tracked = MemoryTracker::stats().current[static_cast<size_t>(MemKind::kv_cache)];
  KvCache cache(layers, B, cap, td.kv_heads, cfg.head_dim(), opts.kv_dtype, cp, cp_rank);
  st = {generation_kv_bytes(cfg, model.tp_rank(), layers, B, cap, opts.kv_dtype, cp), cap};
  st.kv_cache_tracked = MemoryTracker::stats().current[static_cast<size_t>(MemKind::kv_cache)] - tracked;
  st.layers = layers;
  st.slots = cache.slots();
  st.kv_heads = td.kv_heads;
  st.batch = B;
  st.cp = cp;
  PipelineStep step(model, cache, layout, opts, first_index);
  Sequences seqs(prompts, first_index, opts, on_token, out);
  // Prompt groups: sequences b ≡ g (mod G), one group per pipeline stage (at
  // most one per sequence), each stepping on its own.
  const int G = on(layout.pp) ? static_cast<int>(std::min<int64_t>(layout.pp->size(), B)) : 1;
  const int64_t chunk = opts.prefill_chunk > 0 ? opts.prefill_chunk : cap;
  std::vector<std::vector<DecodeRows>> in_flight(static_cast<size_t>(G));  // a step whose choices are due
  std::vector<std::vector<bool>> in_flight_wanted(static_cast<size_t>(G));
  std::vector<bool> finished(static_cast<size_t>(G), false);
  std::vector<Sampled> picked;
  std::vector<DecodeRows> rows;
  std::vector<bool> wanted;
  for (int left = G; left > 0;) {
    for (int g = 0; g < G; ++g) {
      const auto gi = static_cast<size_t>(g);
      if (finished[gi]) continue;
      if (!in_flight[gi].empty()) {  // a stage before the last: the choices of the group's previous step
        step.receive(g, static_cast<int64_t>(in_flight[gi].size()), picked);
        seqs.apply(in_flight[gi], in_flight_wanted[gi], picked);
        in_flight[gi].clear();
      }
      const bool prefill = seqs.next_rows(g, G, cache, chunk, rows, wanted);
      if (rows.empty()) {
        finished[gi] = true;
        --left;
        continue;
      }
      Timer timer;
      const size_t ledger_at = cp > 1 ? layout.cp->context().ledger.entries().size() : 0;
      step.run(g, rows, wanted, picked);
      if (cp > 1 && prefill) count_cp_calls(*layout.cp, ledger_at, st);
      if (step.last_stage()) {
        seqs.apply(rows, wanted, picked);
      } else {
        in_flight[gi] = rows;
        in_flight_wanted[gi] = wanted;
      }
      for (const DecodeRows& e : rows)
        (prefill ? st.prefill_tokens : st.decode_tokens) += e.n;
      (prefill ? st.prefill_s : st.decode_s) += timer.seconds();
    }
  }
  if (stats != nullptr) *stats = st;
  return out;
}

}  // namespace mt
