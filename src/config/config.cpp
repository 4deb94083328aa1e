#include "config/config.h"

#include <toml++/toml.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <variant>

#include "core/error.h"
#include "core/file.h"

namespace mt {

namespace {

using Field = std::variant<int64_t*, uint64_t*, double*, bool*, std::string*>;

struct Entry {
  ConfigKey key;
  std::function<Field(Config&)> field;
};

#define MT_KEY(section, member, type, help)                                                  \
  Entry {                                                                                    \
    {#section "." #member, type, help}, [](Config& c) -> Field { return &c.section.member; } \
  }

// The keys of [model] (the mixture-of-experts ones follow), then [train] and
// [data], then those of [parallel], in the order --help lists them.
std::vector<Entry> model_entries() {
  return {
      MT_KEY(model, vocab_size, "int", "vocabulary size (token ids are 0 .. vocab_size-1)"),
      MT_KEY(model, d_model, "int", "hidden size"),
      MT_KEY(model, n_layers, "int", "number of decoder blocks"),
      MT_KEY(model, n_heads, "int", "query heads; head_dim = d_model / n_heads must be even"),
      MT_KEY(model, n_kv_heads, "int", "key/value heads (grouped-query attention); divides n_heads"),
      MT_KEY(model, ffn_hidden, "int", "SwiGLU MLP hidden size (intermediate_size)"),
      MT_KEY(model, max_seq_len, "int", "longest sequence the model accepts (max_position_embeddings)"),
      MT_KEY(model, rope_theta, "float", "RoPE base frequency"),
      MT_KEY(
          model, rope_scaling, "string",
          "RoPE scaling past the training length, as Hugging Face's rope_scaling: none | "
          "linear,factor=F | dynamic,factor=F[,original_max_position_embeddings=L] | "
          "yarn,factor=F[,original_max_position_embeddings=L,beta_fast=32,beta_slow=1,attention_factor=A] | "
          "llama3,factor=F,low_freq_factor=a,high_freq_factor=b,original_max_position_embeddings=L "
          "(docs/MODEL.md)"),
      MT_KEY(model, norm_eps, "float", "RMSNorm epsilon"),
      MT_KEY(
          model, attention_dropout, "float",
          "training dropout on the attention probabilities (masks independent of the layout; docs/MODEL.md)"),
      MT_KEY(model, hidden_dropout, "float", "training dropout on the o_proj and down_proj outputs (ours)"),
      MT_KEY(model, tie_embeddings, "bool", "share the input embedding and the LM head"),
      MT_KEY(model, init_std, "float",
             "std of the normal initialisation (output projections also / sqrt(2 n_layers))"),
  };
}

std::vector<Entry> train_data_entries() {
  return {
      MT_KEY(train, steps, "int", "optimizer steps"),
      MT_KEY(train, batch_size, "int", "global batch: sequences per step, over all data-parallel ranks"),
      MT_KEY(train, microbatch_size, "int",
             "sequences per rank per forward/backward; accumulation fills the rest"),
      MT_KEY(train, seq_len, "int", "tokens per sequence (<= model.max_seq_len)"),
      MT_KEY(train, lr, "float", "peak learning rate"),
      MT_KEY(train, min_lr, "float", "learning rate at the end of the cosine decay"),
      MT_KEY(train, warmup_steps, "int", "linear warm-up steps"),
      MT_KEY(train, optimizer, "string",
             "adamw | sgd | lamb (sgd: torch.optim.SGD; lamb: AdamW's direction scaled per tensor by "
             "||w|| / ||update||; docs/MODEL.md)"),
      MT_KEY(
          train, weight_decay, "float",
          "weight decay, not on norms and embeddings (adamw, lamb: decoupled; sgd: added to the gradient)"),
      MT_KEY(train, beta1, "float", "AdamW / LAMB beta1"),
      MT_KEY(train, beta2, "float", "AdamW / LAMB beta2"),
      MT_KEY(train, adam_eps, "float", "AdamW / LAMB epsilon"),
      MT_KEY(train, momentum, "float", "sgd momentum (0: none)"),
      MT_KEY(train, nesterov, "bool", "sgd Nesterov momentum (needs momentum > 0)"),
      MT_KEY(
          train, precision, "string",
          "fp32 | bf16 (bf16: every matrix product's operands rounded to bf16, accumulated and written in "
          "fp32; weights, gradients, optimizer state, norms, softmax and losses stay fp32; docs/MODEL.md)"),
      MT_KEY(train, device, "string",
             "cpu | fake | cuda: the kernel table and allocator of the run (fake: for tests, the cpu kernels "
             "behind pointers that fault on a host read; docs/ARCHITECTURE.md \"The kernel seam\")"),
      MT_KEY(train, grad_clip, "float", "clip the global gradient norm to this (0: no clipping)"),
      MT_KEY(train, seed, "int", "seed of the initialisation and of the data sampler"),
      MT_KEY(train, eval_every, "int", "validation loss every N steps and at the end (0: never)"),
      MT_KEY(train, eval_windows, "int", "validation windows of seq_len tokens per evaluation"),
      MT_KEY(train, recompute, "bool|string",
             "recompute activations in the backward (saves memory): none | full (each block keeps only its "
             "input) | selective (the modules of train.recompute_modules); true = full, false = none"),
      MT_KEY(train, recompute_modules, "string",
             "with recompute = selective, a comma-separated list of: attention (the attention core's output "
             "and logsumexp), mlp (the SwiGLU output of dense layers), norms (both RMSNorms' outputs)"),
      MT_KEY(train, max_bad_steps, "int",
             "stop after this many consecutive steps with a NaN/Inf loss or grad norm"),
      MT_KEY(train, log_every, "int", "print a log line every N steps"),
      MT_KEY(train, threads, "int",
             "threads per rank (0: this machine's cores / ranks on it; at most 4 x the cores)"),
      MT_KEY(train, init_allow, "string",
             "--init-from: comma-separated model fields that may differ from the saved config.json and take "
             "this run's value (rope_theta, norm_eps, max_seq_len, rope_scaling); any other difference is "
             "refused"),
      MT_KEY(train, checkpoint_dir, "string",
             "write training checkpoints (parameters, AdamW state, step) here as step-N/ folders; the last "
             "step is always saved; `--resume auto` continues from the newest; one run at a time (a lock); "
             "a run without --resume refuses a directory holding checkpoints (empty: no checkpoints)"),
      MT_KEY(train, checkpoint_every, "int", "also save a checkpoint every N steps (0: only the last step)"),
      MT_KEY(train, keep_checkpoints, "int",
             "keep the checkpoint just committed and the N - 1 before it; older ones, and newer ones a "
             "rollback superseded, are deleted (0: keep all but those)"),
      MT_KEY(train, async_checkpoint, "bool",
             "copy the state to host buffers at the step and write the checkpoint on a background thread "
             "while training goes on (at most one save in flight)"),
      MT_KEY(train, resume_allow, "string",
             "--resume: comma-separated keys that may differ from the checkpoint's config, by full or "
             "short name (e.g. \"batch_size,seed,max_seq_len\"); any other differing model, optimizer or "
             "data key is refused"),
      MT_KEY(data, dir, "string", "folder with train.bin and val.bin (written by `meshtrain prepare`)"),
      MT_KEY(data, ignore_id, "int", "targets equal to this token id are ignored by the loss (-1: none)"),
  };
}

// The mixture-of-experts keys of [model] (docs/MODEL.md "Mixture of experts").
std::vector<Entry> moe_entries() {
  return {
      MT_KEY(model, n_experts, "int",
             "experts per mixture-of-experts layer (0: a dense model; Mixtral's num_local_experts)"),
      MT_KEY(model, moe_every, "int",
             "every N-th layer (layers N-1, 2N-1, ...) is a mixture of experts, the others dense (1: all)"),
      MT_KEY(model, top_k, "int", "experts per token (num_experts_per_tok), 1 .. n_experts"),
      MT_KEY(model, expert_ffn_hidden, "int", "each expert's SwiGLU hidden size (0: ffn_hidden)"),
      MT_KEY(model, router_aux_loss_coef, "float",
             "weight of the load-balancing loss (Mixtral's) added to the training loss"),
      MT_KEY(model, router_z_loss_coef, "float",
             "weight of the router z-loss, mean of logsumexp(router logits)^2 (not in Mixtral)"),
      MT_KEY(model, capacity_factor, "float",
             "0: dropless; > 0: each expert takes at most ceil(capacity_factor x tokens x top_k / n_experts) "
             "of a microbatch's tokens, the rest pass through the residual only"),
      MT_KEY(model, router_bias_rate, "float",
             "> 0: aux-loss-free balancing: a per-expert bias added to the scores for selection only, moved "
             "by this much after each step toward the mean load"),
      MT_KEY(model, router_skew, "float",
             "test knob: expert 0's selection bias starts here, so it wins most tokens (congestion)"),
  };
}

std::vector<Entry> parallel_entries() {
  return {
      MT_KEY(parallel, dp, "int", "data-parallel degree (ranks holding the same shard, different data)"),
      MT_KEY(parallel, tp, "int",
             "tensor-parallel degree (Megatron): divides n_heads and ffn_hidden; n_kv_heads and tp, one "
             "divides the other"),
      MT_KEY(parallel, pp, "int",
             "pipeline-parallel degree: layers split into pp stages (pp x virtual_stages, interleaved)"),
      MT_KEY(parallel, cp, "int",
             "context-parallel degree: each sequence over cp ranks in 2 x cp zigzag chunks"),
      MT_KEY(parallel, ep, "int",
             "expert-parallel degree: each rank holds n_experts / ep experts, tokens travel by all-to-all; "
             "ep divides dp x cp (groups of ep consecutive dp ranks) and n_experts; any ZeRO stage (0-3)"),
      MT_KEY(parallel, zero, "int",
             "ZeRO stage: 0 replicate, 1 shard AdamW state, 2 + gradients, 3 + parameters (FSDP)"),
      MT_KEY(parallel, dp_shard, "int",
             "HSDP: ZeRO 1-3 shard over groups of dp_shard consecutive dp ranks (divides dp); 0: dp"),
      MT_KEY(parallel, dp_allreduce, "string",
             "ZeRO 0/1 gradient all-reduce: flat | hierarchical (reduce-scatter in each node, all-reduce "
             "across nodes, all-gather in the node)"),
      MT_KEY(parallel, sp, "bool",
             "sequence parallelism (Megatron SP): activations outside the tp regions (norms, residual) are "
             "sharded by token over tp; needs tp > 1 and seq_len divisible by tp"),
      MT_KEY(parallel, tp_overlap, "bool",
             "hide TP communication behind compute: the GEMMs beside a TP collective (row forward, column "
             "input gradient; under sp the gathered ones, per rank block) run in token pieces, each piece's "
             "collective in flight while the next multiplies; bitwise equal to false; needs tp > 1"),
      MT_KEY(
          parallel, tp2d, "string",
          "2-D tensor parallelism: \"R,C\" with R x C = tp (docs/PARALLELISM.md); \"1,C\" is 1-D tp over C "
          "ranks; R > 1 splits every weight over the grid and needs tp to divide n_heads, n_kv_heads and "
          "ffn_hidden (not with sp, cp, pp, experts, dropout, tp_overlap); empty: 1-D tp"),
      MT_KEY(parallel, schedule, "string", "pipeline schedule: gpipe | 1f1b | interleaved | zbh1"),
      MT_KEY(parallel, virtual_stages, "int",
             "virtual stages (model chunks) per rank; > 1 needs schedule = interleaved"),
      MT_KEY(parallel, stage_layers, "string",
             "layers per virtual stage, e.g. \"3,2,2,1\" (pp x virtual_stages entries summing to n_layers); "
             "empty: an even split, the first stages taking one more"),
      MT_KEY(parallel, cp_impl, "string", "cp attention: ring | allgather | ulysses (all-to-all) | hybrid"),
      MT_KEY(parallel, cp_ulysses, "int", "hybrid cp: all-to-all group size (divides cp, 1 < it < cp)"),
      MT_KEY(parallel, reduction, "string",
             "default | canonical: every gradient summed over a fixed tree, the loss and gradient norm "
             "exactly: each layout it covers is bitwise one process with the same microbatch and grains "
             "(docs/PARALLELISM.md \"The canonical mode\")"),
      MT_KEY(parallel, canonical_tp, "int",
             "the canonical mode's tp grain c, a power of two dividing n_heads, ffn_hidden, vocab_size and a "
             "microbatch's tokens, and dividing n_kv_heads or divided by it (kv slots): every sum over a "
             "tp-split dim is a fixed tree over c pieces and the norm weights' gradients over c token "
             "shards, so tp 1 to c (any tp dividing c, with or without sp or tp_overlap) is bitwise one "
             "process with the same c; 1: no pieces, tp 1 only; kept across a resume"),
      MT_KEY(parallel, canonical_cp, "int",
             "the canonical mode's cp grain C (a power of two; cp divides it; microbatch_size 1; seq_len / C "
             "a multiple of 128): fixed pieces and key chunks, bitwise one process with the same C"),
      MT_KEY(parallel, canonical_tp_d, "int",
             "the canonical mode's d grain g (a power of two dividing d_model): sums over the model width in "
             "g fixed pieces, so a tp2d grid (tp dividing g) is bitwise one process; 1: none"),
      MT_KEY(parallel, bucket_mb, "float", "gradient bucket size in MiB for the ZeRO 0/1 all-reduce"),
      MT_KEY(parallel, timeout_s, "float",
             "watchdog: a collective not complete after this many seconds ends the job"),
      MT_KEY(parallel, io_timeout_s, "float",
             "watchdog for waits on another rank's long local work (its save of the model, its write of a "
             "trace): such a wait not complete after this many seconds ends the job"),
  };
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = [] {
    std::vector<Entry> t = model_entries();
    for (auto* part : {moe_entries, train_data_entries, parallel_entries})
      for (Entry& e : part())
        t.push_back(std::move(e));
    return t;
  }();
  return table;
}
#undef MT_KEY

const Entry& find_entry(const std::string& key) {
  for (const auto& e : entries()) {
    if (e.key.name == key) return e;
  }
  const std::string section = key.substr(0, key.find('.'));
  std::string known;
  for (const auto& e : entries()) {
    if (e.key.name.compare(0, section.size() + 1, section + ".") == 0)
      known += (known.empty() ? "" : ", ") + e.key.name;
  }
  if (known.empty()) {
    MT_THROW(ConfigError, "unknown config key '", key,
             "' (sections are model, train, data, parallel; `meshtrain train --help` lists every key)");
  }
  MT_THROW(ConfigError, "unknown config key '", key, "' (keys of [", section, "]: ", known, ")");
}

template <typename T>
T parse_number(const std::string& key, const std::string& text, const char* what) {
  T value{};
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  MT_REQUIRE(ec == std::errc() && ptr == last, ConfigError, "config key ", key, ": '", text, "' is not ",
             what);
  return value;
}

std::string format_double(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  // The shortest text that reads back to the same double.
  for (int p = 1; p <= 17; ++p) {
    std::ostringstream t;
    t.precision(p);
    t << v;
    if (std::strtod(t.str().c_str(), nullptr) == v) return t.str();
  }
  return os.str();
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    std::vector<ConfigKey> k;
    for (const auto& e : entries())
      k.push_back(e.key);
    return k;
  }();
  return keys;
}

std::string config_get(const Config& c, const std::string& key) {
  Config& mc = const_cast<Config&>(c);  // the accessor is shared with config_set; nothing is written
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>)
          return *p ? "true" : "false";
        else if constexpr (std::is_same_v<T, double>)
          return format_double(*p);
        else if constexpr (std::is_same_v<T, std::string>)
          return *p;
        else
          return std::to_string(*p);
      },
      find_entry(key).field(mc));
}

void config_set(Config& c, const std::string& key, const std::string& value) {
  const Entry& entry = find_entry(key);
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) {
          MT_REQUIRE(value == "true" || value == "false", ConfigError, "config key ", key, ": '", value,
                     "' is not a boolean (true or false)");
          *p = value == "true";
        } else if constexpr (std::is_same_v<T, double>) {
          char* end = nullptr;
          errno = 0;
          const double v = std::strtod(value.c_str(), &end);
          MT_REQUIRE(!value.empty() && end == value.c_str() + value.size() && errno == 0 && std::isfinite(v),
                     ConfigError, "config key ", key, ": '", value, "' is not a finite number");
          *p = v;
        } else if constexpr (std::is_same_v<T, std::string>) {
          *p = value;
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          *p = parse_number<uint64_t>(key, value, "a non-negative integer");
        } else {
          *p = parse_number<int64_t>(key, value, "an integer");
        }
      },
      entry.field(c));
  c.set_keys.insert(entry.key.name);
}

Config parse_config_text(const std::string& toml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides) {
  Config c;
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    MT_THROW(ConfigError, source_name, ":", where.line, ":", where.column, ": ", e.description());
  }
  for (const auto& [section, node] : root) {
    const std::string sec(section.str());
    const toml::table* tbl = node.as_table();
    MT_REQUIRE(tbl != nullptr, ConfigError, source_name, ": '", sec,
               "' must be a section ([model], [train], [data] or [parallel]), not a value");
    for (const auto& [name, value] : *tbl) {
      const std::string key = sec + "." + std::string(name.str());
      const Entry& e = find_entry(key);
      std::string text;
      if (auto v = value.value_exact<int64_t>())
        text = std::to_string(*v);
      else if (auto d = value.value_exact<double>())
        text = format_double(*d);
      else if (auto b = value.value_exact<bool>())
        text = *b ? "true" : "false";
      else if (auto s = value.value_exact<std::string>())
        text = *s;
      else
        MT_THROW(ConfigError, source_name, ": ", key, " must be of type ", e.key.type);
      // A TOML string where a number is expected (or the reverse) is an error, not a conversion.
      const bool is_string = value.is_string();  // "bool|string": either
      MT_REQUIRE(is_string ? e.key.type.ends_with("string") : e.key.type != "string", ConfigError,
                 source_name, ": ", key, " = ", text, " must be of type ", e.key.type,
                 (is_string ? " (found a quoted string)" : " (quote strings)"));
      MT_REQUIRE(!(e.key.type == "int" && value.is_floating_point()), ConfigError, source_name, ": ", key,
                 " = ", text, " must be an integer");
      config_set(c, key, text);
    }
  }
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    MT_REQUIRE(eq != std::string::npos && eq > 0, ConfigError, "--set '", o,
               "' must have the form section.key=value");
    config_set(c, o.substr(0, eq), o.substr(eq + 1));
  }
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = path.empty() ? std::string() : read_file(path, kMaxConfigFile, "config file");
  return parse_config_text(text, path.empty() ? "(defaults)" : path, overrides);
}

std::string config_help() {
  const Config defaults;
  std::ostringstream os;
  std::string section;
  for (const auto& k : config_keys()) {
    const std::string sec = k.name.substr(0, k.name.find('.'));
    if (sec != section) {
      os << (section.empty() ? "" : "\n") << "[" << sec << "]\n";
      section = sec;
    }
    std::string left = "  " + k.name + " = " + config_get(defaults, k.name);
    if (left.size() < 40) left.resize(40, ' ');
    os << left << " " << k.type << ": " << k.help << "\n";
  }
  return os.str();
}

}  // namespace mt
