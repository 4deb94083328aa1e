#include "cost/memory_estimate.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "cost/memory_model.h"
#include "cost/memory_model_parts.h"

namespace mt {

const std::pair<std::string, int64_t>& MemoryEstimate::largest() const {
  return *std::max_element(parts.begin(), parts.end(),
                           [](const auto& a, const auto& b) { return a.second < b.second; });
}

int64_t checked_param_count(const ModelConfig& m) {
  const int64_t d = m.d_model;
  const int64_t hd = m.n_heads > 0 ? d / m.n_heads : 0;
  const int64_t q = checked_mul(m.n_heads, hd, "the query projection");
  const int64_t kv = checked_mul(m.n_kv_heads, hd, "the key/value projections");
  int64_t layer = checked_mul(d, checked_add(q, checked_mul(2, kv, "k and v"), "q, k and v"), "wqkv");
  layer = checked_add(layer, checked_mul(q, d, "wo"), "a layer");
  layer = checked_add(layer, checked_mul(2, d, "the norms"), "a layer");
  const int64_t embed = checked_mul(m.vocab_size, d, "the embedding (vocab_size x d_model)");
  int64_t total = checked_mul(layer, m.n_layers, "the layers (per layer x n_layers)");
  const int64_t n_moe = m.n_moe_layers();
  const int64_t mlp = checked_mul(checked_mul(3, d, "the MLP"), m.ffn_hidden, "the MLP");
  total = checked_add(total, checked_mul(mlp, m.n_layers - n_moe, "the MLPs"), "the layers");
  if (n_moe > 0) {  // the router and every expert
    const int64_t expert = checked_mul(checked_mul(3, d, "an expert"), m.expert_hidden(), "an expert");
    const int64_t moe = checked_mul(checked_add(expert, d, "an expert"), m.n_experts, "the experts");
    total = checked_add(total, checked_mul(moe, n_moe, "the experts"), "the layers");
  }
  total = checked_add(total, embed, "the model");
  total = checked_add(total, d, "the model");
  return m.tie_embeddings ? total : checked_add(total, embed, "the model");
}

namespace {
constexpr int64_t kFloat = 4;
// Above 64 TiB a rank the coarse model's refusal stands (see coarse_training_memory).
constexpr int64_t kExactModelLimit = int64_t{1} << 46;

// The experts' weights (not their routers): a rank holds n_experts / ep of
// them under expert parallelism (docs/PARALLELISM.md, "Expert parallelism").
int64_t expert_param_count(const ModelConfig& m) {
  if (!m.moe()) return 0;
  const int64_t expert = checked_mul(checked_mul(3, m.d_model, "an expert"), m.expert_hidden(), "an expert");
  return checked_mul(checked_mul(expert, m.n_experts, "the experts"), m.n_moe_layers(), "the experts");
}

// Activations kept for the backward per token and layer, in floats: the layer
// input and both norm outputs, q/k/v, the attention output, the residual, and
// the MLP's gate, up and product (docs/MODEL.md's layer).
int64_t floats_per_token_layer(const ModelConfig& m) {
  const int64_t d = m.d_model, hd = m.n_heads > 0 ? d / m.n_heads : 0;
  const int64_t qkv =
      checked_mul(checked_add(m.n_heads, checked_mul(2, m.n_kv_heads, "kv"), "heads"), hd, "qkv");
  int64_t f = checked_add(checked_mul(5, d, "activations"), qkv, "activations");
  int64_t mlp = checked_mul(3, m.ffn_hidden, "activations");
  if (m.moe()) {  // per choice: its input, gate, up, product and output rows; the router's probabilities
    const int64_t per_choice = checked_add(checked_mul(2, d, "activations"),
                                           checked_mul(3, m.expert_hidden(), "activations"), "activations");
    mlp =
        std::max(mlp, checked_add(checked_mul(m.top_k, per_choice, "activations"), m.n_experts + 2 * m.top_k,
                                  "activations"));  // every layer counted as the larger
  }
  return checked_add(f, mlp, "activations");
}

// The optimizer's state as the estimate names it.
const char* optimizer_state_name(OptimizerKind kind) {
  return kind == OptimizerKind::sgd    ? "SGD momentum"
         : kind == OptimizerKind::lamb ? "LAMB state"
                                       : "AdamW state";
}

// cos and sin of every position up to max_seq_len and each of head_dim / 2
// frequencies.
int64_t rope_table_bytes(const ModelConfig& m) {
  const int64_t hd = m.n_heads > 0 ? m.d_model / m.n_heads : 0;
  return checked_mul(checked_mul(m.max_seq_len, hd, "the RoPE tables (max_seq_len x head_dim)"), kFloat,
                     "the RoPE tables");
}

// The first, coarse model (no padding, no ZeRO buffers, every layer's
// activations counted as the largest): kept as the overflow-checked screen for
// sizes no machine could hold, where the exact model would build parameter
// tables of absurd lengths.
MemoryEstimate coarse_training_memory(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  const ParallelConfig& p = cfg.parallel;
  const int64_t ep = std::max<int64_t>(1, p.ep), tp_pp = std::max<int64_t>(1, p.tp * p.pp);
  const int64_t dp = std::max<int64_t>(1, p.dp), replicas = std::max<int64_t>(1, dp * p.cp / ep);
  // This rank's share of the dense parameters and of its n_experts / ep
  // experts; ZeRO shards the dense ones over dp, the experts over the ranks
  // holding the same experts (dp·cp / ep, docs/PARALLELISM.md "Expert parallelism").
  const int64_t experts = expert_param_count(m) / ep / tp_pp;
  const int64_t dense = (checked_param_count(m) - expert_param_count(m)) / tp_pp;
  const auto state = [&](int zero_from, int64_t bytes, const char* what) {
    const bool sharded = p.zero >= zero_from;
    const int64_t n = checked_add(dense / (sharded ? dp : 1), experts / (sharded ? replicas : 1), what);
    return checked_mul(n, bytes, what);
  };
  MemoryEstimate e;
  e.parts.emplace_back("parameters", state(3, kFloat, "the parameters"));
  e.parts.emplace_back("gradients", state(2, kFloat, "the gradients"));
  // adamw and lamb keep two moments per parameter, sgd one momentum buffer (none without momentum).
  const int64_t states = memory_model::optimizer_states(cfg);
  const char* what = optimizer_state_name(cfg.parsed().optimizer);
  e.parts.emplace_back(what, state(1, states * kFloat, what));
  const int64_t tokens = checked_mul(cfg.train.microbatch_size,
                                     cfg.train.seq_len / std::max<int64_t>(1, p.cp), "a microbatch's tokens");
  const int64_t in_flight = p.pp > 1 ? p.pp : 1;  // microbatches whose activations a stage holds at once
  const int64_t layers = cfg.parsed().recompute.full() ? 1 : (m.n_layers + p.pp - 1) / std::max<int64_t>(1, p.pp);
  int64_t act =
      checked_mul(checked_mul(tokens, floats_per_token_layer(m), "activations"), layers, "activations");
  act = checked_mul(checked_mul(act, in_flight, "activations"), kFloat, "activations");
  e.parts.emplace_back("activations", act);
  // Logits and their gradient, the vocabulary split over tp.
  e.parts.emplace_back("logits",
                       checked_mul(checked_mul(tokens, m.vocab_size / std::max<int64_t>(1, p.tp), "logits"),
                                   2 * kFloat, "logits"));
  e.parts.emplace_back("RoPE tables", rope_table_bytes(m));
  for (const auto& [name, bytes] : e.parts)
    e.total = checked_add(e.total, bytes, "the memory estimate");
  return e;
}

}  // namespace

MemoryEstimate estimate_training_memory(const Config& cfg, MemoryFigure figure) {
  MemoryEstimate coarse = coarse_training_memory(cfg);
  if (coarse.total > kExactModelLimit || cfg.model.n_layers > 100000) return coarse;
  // The rank with the most: ranks differ by pp stage and experts, never by dp
  // or cp alone, nor by tp coordinate (every tp shard allocates the same
  // shapes: a vocabulary tp does not divide is padded to equal shards,
  // parallel/tp_plan.cpp; tested in tests/train/test_memory_model.cpp), so
  // tp rank 0 of each stage stands for its tp group.
  const ParallelConfig& p = cfg.parallel;
  std::vector<int64_t> ranks;
  for (int64_t pp = 0; pp < p.pp; ++pp)
    for (int64_t e = 0; e < std::max<int64_t>(1, p.ep); ++e)
      ranks.push_back(((e / p.cp * p.pp + pp) * p.cp + e % p.cp) * p.tp);
  const auto bytes = [figure](const RankMemory& r) -> const std::array<int64_t, kNumMemKinds>& {
    return figure == MemoryFigure::peak ? r.lower : r.upper;
  };
  const auto sum = [&](const RankMemory& r) {
    int64_t t = 0;
    for (const int64_t b : bytes(r))
      t += b;
    return t;
  };
  RankMemory worst;
  for (const RankMemory& r : estimate_ranks(cfg, ranks))
    if (sum(r) > sum(worst)) worst = r;
  const char* optim = optimizer_state_name(cfg.parsed().optimizer);
  const char* names[kNumMemKinds] = {"parameters",  "gradients",         optim,
                                     "activations", "scratch",           "communication buffers",
                                     "KV cache",    "checkpoint staging"};
  MemoryEstimate e;
  e.rank = worst.rank;
  e.by_kind = bytes(worst);
  for (int k = 0; k < kNumMemKinds; ++k)
    e.parts.emplace_back(names[k], e.by_kind[static_cast<size_t>(k)]);
  e.total = sum(worst);
  return e;
}

MemoryEstimate estimate_eval_memory(const ModelConfig& m, int64_t batch, int64_t seq) {
  MemoryEstimate e;
  e.parts.emplace_back("parameters", checked_mul(checked_param_count(m), kFloat, "the parameters"));
  const int64_t tokens = checked_mul(batch, seq, "a batch's tokens");
  e.parts.emplace_back(
      "activations",
      checked_mul(checked_mul(tokens, floats_per_token_layer(m), "activations"), kFloat, "activations"));
  e.parts.emplace_back("logits", checked_mul(checked_mul(tokens, m.vocab_size, "logits"), kFloat, "logits"));
  e.parts.emplace_back("RoPE tables", rope_table_bytes(m));
  for (const auto& [name, bytes] : e.parts)
    e.total = checked_add(e.total, bytes, "the memory estimate");
  return e;
}

namespace {
// The first number in `path` (or after `key` in it), -1 when absent or "max".
int64_t read_number(const std::string& path, const std::string& key = "") {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!key.empty() && line.compare(0, key.size(), key) != 0) continue;
    std::istringstream is(key.empty() ? line : line.substr(key.size()));
    long long v = -1;
    if (!(is >> v)) return -1;
    return key.empty() ? v : v * 1024;  // /proc/meminfo counts kB
  }
  return -1;
}
}  // namespace

int64_t available_memory_bytes() {
  int64_t avail = read_number("/proc/meminfo", "MemAvailable:");
  // cgroup v2, then v1; a limit of "max" (or v1's huge number) reads as none.
  int64_t limit = read_number("/sys/fs/cgroup/memory.max");
  int64_t used = read_number("/sys/fs/cgroup/memory.current");
  if (limit < 0) {
    limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (limit > 0 && limit < (int64_t{1} << 60)) {
    const int64_t left = std::max<int64_t>(0, limit - std::max<int64_t>(0, used));
    avail = avail < 0 ? left : std::min(avail, left);
  }
  return avail;
}

void require_fits(const MemoryEstimate& e, int ranks_here, int64_t available) {
  if (available < 0) return;
  const int64_t need =
      checked_mul(e.total, std::max(1, ranks_here), "the memory estimate of this machine's ranks");
  const double gib = 1024.0 * 1024.0 * 1024.0;
  MT_REQUIRE(need <= available, ConfigError, "the run needs about ", static_cast<double>(need) / gib,
             " GiB on this machine (", ranks_here, " rank(s) x ", static_cast<double>(e.total) / gib,
             " GiB) but only ", static_cast<double>(available) / gib,
             " GiB is available (min of MemAvailable and the cgroup limit); the largest part is ",
             e.largest().first, " (", static_cast<double>(e.largest().second) / gib, " GiB per rank)");
}

}  // namespace mt
