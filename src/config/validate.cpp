// Config::validate and the notes on keys without effect. Each parallel rule is
// checked by calling the function that the code relying on it calls, so that
// the rule and its message live in one place.
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "config/config.h"
#include "core/error.h"
#include "model/params.h"
#include "ops/gemm.h"
#include "optim/optimizer.h"
#include "parallel/canonical.h"
#include "parallel/canonical_tp_kv.h"
#include "parallel/context_parallel.h"
#include "parallel/cp_ulysses.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_parallel.h"
#include "parallel/tp2d.h"
#include "parallel/tp_comm.h"
#include "pipeline/schedule.h"
#include "pipeline/stages.h"

namespace mt {

namespace {

void positive(const char* name, int64_t v) {
  MT_REQUIRE(v > 0, ConfigError, name, " (", v, ") must be positive");
}

void validate_train(const TrainConfig& t, const ModelConfig& model, ParsedKeys& keys) {
  positive("train.steps", t.steps);
  positive("train.batch_size", t.batch_size);
  positive("train.microbatch_size", t.microbatch_size);
  positive("train.seq_len", t.seq_len);
  MT_REQUIRE(t.seq_len <= model.max_seq_len, ConfigError, "train.seq_len (", t.seq_len,
             ") must not exceed model.max_seq_len (", model.max_seq_len, ")");
  MT_REQUIRE(t.lr > 0, ConfigError, "train.lr (", t.lr, ") must be positive");
  MT_REQUIRE(t.min_lr >= 0 && t.min_lr <= t.lr, ConfigError, "train.min_lr (", t.min_lr,
             ") must be between 0 and train.lr (", t.lr, ")");
  MT_REQUIRE(t.warmup_steps >= 0, ConfigError, "train.warmup_steps (", t.warmup_steps,
             ") must not be negative");
  MT_REQUIRE(t.weight_decay >= 0, ConfigError, "train.weight_decay (", t.weight_decay,
             ") must not be negative");
  MT_REQUIRE(t.beta1 >= 0 && t.beta1 < 1, ConfigError, "train.beta1 (", t.beta1, ") must be in [0, 1)");
  MT_REQUIRE(t.beta2 >= 0 && t.beta2 < 1, ConfigError, "train.beta2 (", t.beta2, ") must be in [0, 1)");
  MT_REQUIRE(t.adam_eps > 0, ConfigError, "train.adam_eps (", t.adam_eps, ") must be positive");
  keys.optimizer = parse_optimizer(t.optimizer);
  keys.precision = parse_matmul_precision(t.precision);
  keys.device = parse_run_device(t.device);
  check_run_device(keys.device);
  MT_REQUIRE(t.momentum >= 0 && t.momentum < 1, ConfigError, "train.momentum (", t.momentum,
             ") must be in [0, 1)");
  MT_REQUIRE(!t.nesterov || (keys.optimizer == OptimizerKind::sgd && t.momentum > 0), ConfigError,
             "train.nesterov needs train.optimizer = sgd and train.momentum > 0 (optimizer ", t.optimizer,
             ", momentum ", t.momentum, ")");
  MT_REQUIRE(t.grad_clip >= 0, ConfigError, "train.grad_clip (", t.grad_clip, ") must not be negative");
  MT_REQUIRE(t.eval_every >= 0, ConfigError, "train.eval_every (", t.eval_every, ") must not be negative");
  positive("train.eval_windows", t.eval_windows);
  positive("train.max_bad_steps", t.max_bad_steps);
  positive("train.log_every", t.log_every);
  MT_REQUIRE(t.threads >= 0, ConfigError, "train.threads (", t.threads, ") must not be negative");
  MT_REQUIRE(t.checkpoint_every >= 0, ConfigError, "train.checkpoint_every (", t.checkpoint_every,
             ") must not be negative");
  MT_REQUIRE(t.keep_checkpoints >= 0, ConfigError, "train.keep_checkpoints (", t.keep_checkpoints,
             ") must not be negative");
}

// The pipeline's rules with the run's numbers (microbatches = batch_size /
// (dp x microbatch_size)), in the order the model's constructors meet them.
void validate_pipeline(const Config& c, ParsedKeys& keys) {
  const ParallelConfig& p = c.parallel;
  const auto pp = static_cast<int>(p.pp), v = static_cast<int>(p.virtual_stages);
  pp::check_virtual_stages(pp, v);
  if (pp == 1) return;
  const auto microbatches = static_cast<int>(c.train.batch_size / (p.dp * c.train.microbatch_size));
  pp::validate_schedule(keys.schedule, pp, v, microbatches, c.model.n_layers);
  keys.stage_layers = pp::stage_layer_counts(c.model.n_layers, pp, v, p.stage_layers);
}

// What the mixture of experts does not have yet (docs/PARALLELISM.md "Expert
// parallelism"): refused by name rather than run with a wrong result.
void validate_moe_layout(const Config& c, const ParsedKeys& keys) {
  const ParallelConfig& p = c.parallel;
  positive("parallel.ep", p.ep);
  ep::check_expert_parallel(
      {p.ep, c.model.n_experts, p.dp, p.cp, c.model.capacity_factor, keys.optimizer == OptimizerKind::lamb});
  if (!c.model.moe()) return;
  const bool shared_tokens = p.cp > 1 || (p.tp > 1 && p.sp);  // a microbatch's tokens over several ranks
  MT_REQUIRE(c.model.router_bias_rate == 0 || !shared_tokens, ConfigError, "model.router_bias_rate (",
             c.model.router_bias_rate, ") with parallel.cp (", p.cp, ") or parallel.tp (", p.tp,
             ") with parallel.sp: the bias would move by each rank's share of the tokens, not the whole "
             "microbatch's (not built yet)");
  // A checkpoint's metadata.json (rank 0's) holds the bias of rank 0's stage only.
  MT_REQUIRE(c.model.router_bias_rate == 0 || c.train.checkpoint_dir.empty() || p.pp == 1, ConfigError,
             "model.router_bias_rate (", c.model.router_bias_rate, ") with train.checkpoint_dir ('",
             c.train.checkpoint_dir, "') and parallel.pp (", p.pp,
             "): checkpoints do not save the bias of the later pipeline stages yet");
}

// parallel.cp_impl and parallel.cp_ulysses: the hybrid's group size, and the
// heads Ulysses splits (parallel/cp_ulysses.h) with the numbers.
void validate_cp_impl(const Config& c, const ParsedKeys& keys) {
  const ParallelConfig& p = c.parallel;
  const bool hybrid = keys.cp_impl == cp::CpImpl::hybrid;
  MT_REQUIRE(hybrid || p.cp_ulysses == 0, ConfigError, "parallel.cp_ulysses (", p.cp_ulysses,
             ") is the all-to-all group size of parallel.cp_impl = hybrid, not ", p.cp_impl);
  MT_REQUIRE(!hybrid || (p.cp_ulysses > 1 && p.cp_ulysses < p.cp && p.cp % p.cp_ulysses == 0), ConfigError,
             "parallel.cp_impl = hybrid needs parallel.cp_ulysses (", p.cp_ulysses,
             ") dividing parallel.cp (", p.cp,
             ") with 1 < cp_ulysses < cp: all-to-all inside groups of "
             "cp_ulysses ranks, ring across cp / cp_ulysses groups");
  if (p.cp == 1 || (keys.cp_impl != cp::CpImpl::ulysses && !hybrid)) return;
  const int U = static_cast<int>(hybrid ? p.cp_ulysses : p.cp);
  const TpDims td = tp_dims(c.model, TpRank{static_cast<int>(p.tp), 0});
  std::ostringstream who;
  who << "parallel.cp_impl = " << p.cp_impl << " (cp " << p.cp << ", tp " << p.tp << ")";
  const bool canonical = keys.reduction == Reduction::canonical;  // its kv slots are what attention reads
  const int64_t kv =
      canonical ? tp::attention_kv_heads(td.kv_heads, p.canonical_tp, c.model.n_kv_heads, p.tp) : td.kv_heads;
  cp::check_ulysses_heads(td.heads, kv, U, who.str().c_str());
  if (!canonical) return;
  MT_REQUIRE(
      kv % U == 0, ConfigError, who.str(), " in the canonical mode needs the attention's kv heads per rank (",
      kv, ") divisible by the all-to-all's ", U,
      " ranks: a kv head shared by several ranks would sum its key gradient across ranks, not in the "
      "one-process order (parallel.cp_impl = hybrid with cp_ulysses dividing the kv heads keeps each whole)");
}

// parallel.reduction: the canonical mode's rules (parallel/canonical.h).
void validate_reduction(const Config& c, ParsedKeys& keys) {
  keys.reduction = parse_reduction(c.parallel.reduction);
  MT_REQUIRE(keys.reduction == Reduction::canonical || c.parallel.canonical_tp == 1, ConfigError,
             "parallel.canonical_tp (", c.parallel.canonical_tp,
             ") is the canonical mode's grain: it needs parallel.reduction = canonical");
  MT_REQUIRE(keys.reduction == Reduction::canonical || c.parallel.canonical_cp == 1, ConfigError,
             "parallel.canonical_cp (", c.parallel.canonical_cp,
             ") is the canonical mode's cp grain: it needs parallel.reduction = canonical");
  MT_REQUIRE(keys.reduction == Reduction::canonical || c.parallel.canonical_tp_d == 1, ConfigError,
             "parallel.canonical_tp_d (", c.parallel.canonical_tp_d,
             ") is the canonical mode's d grain: it needs parallel.reduction = canonical");
  if (keys.reduction != Reduction::canonical) return;
  MT_REQUIRE(c.parallel.canonical_tp_d == 1 || keys.device == RunDevice::cpu, ConfigError,
             "parallel.canonical_tp_d (", c.parallel.canonical_tp_d, ") needs train.device = cpu, not ",
             run_device_name(keys.device), ": its sums over d pieces run on the host");
  MT_REQUIRE(c.parallel.canonical_cp == 1 || keys.device == RunDevice::cpu, ConfigError,
             "parallel.canonical_cp (", c.parallel.canonical_cp, ") needs train.device = cpu, not ",
             run_device_name(keys.device), ": its sums over cp pieces run on the host");
  MT_REQUIRE(c.parallel.canonical_tp == 1 || keys.device == RunDevice::cpu, ConfigError,
             "parallel.canonical_tp (", c.parallel.canonical_tp, ") needs train.device = cpu, not ",
             run_device_name(keys.device), ": its sums over tp pieces run on the host");
  const ParallelConfig& p = c.parallel;
  const bool onednn = keys.precision == MatmulPrecision::bf16 &&
                      resolve_bf16_kernel(std::getenv("MESHTRAIN_BF16_MATMUL")) == Bf16Kernel::onednn;
  check_canonical({p.dp,
                   p.tp,
                   p.cp,
                   p.pp,
                   p.ep,
                   p.sp,
                   p.tp_overlap,
                   keys.tp_grid.two_d(),
                   c.model.moe(),
                   onednn,
                   c.train.batch_size,
                   c.train.microbatch_size,
                   c.train.microbatch_size * c.train.seq_len,
                   p.canonical_tp,
                   c.model.n_heads,
                   c.model.n_kv_heads,
                   c.model.ffn_hidden,
                   c.model.vocab_size,
                   p.canonical_cp,
                   c.train.seq_len,
                   p.canonical_tp_d,
                   c.model.d_model});
}
}  // namespace

void Config::validate() {
  validated_ = false;
  ParsedKeys keys;
  model.validate();
  validate_train(train, model, keys);
  const TrainConfig& t = train;
  const ParallelConfig& p = parallel;
  positive("parallel.dp", p.dp);
  positive("parallel.tp", p.tp);
  keys.schedule = pp::parse_schedule_kind(p.schedule);
  keys.cp_impl = cp::parse_cp_impl(p.cp_impl);
  check_zero_stage(p.zero);
  positive("parallel.cp", p.cp);
  if (p.cp > 1) cp::check_zigzag(t.seq_len, static_cast<int>(p.cp));
  positive("parallel.pp", p.pp);
  positive("parallel.virtual_stages", p.virtual_stages);
  MT_REQUIRE(p.bucket_mb > 0, ConfigError, "parallel.bucket_mb (", p.bucket_mb, ") must be positive");
  MT_REQUIRE(p.timeout_s > 0, ConfigError, "parallel.timeout_s (", p.timeout_s, ") must be positive");
  MT_REQUIRE(p.io_timeout_s > 0, ConfigError, "parallel.io_timeout_s (", p.io_timeout_s,
             ") must be positive");
  tp_dims(model, TpRank{static_cast<int>(p.tp), 0});  // Megatron's split: heads, MLP channels, kv heads
  if (p.sp) tp::check_sequence_parallel(t.seq_len, p.cp, p.tp);
  MT_REQUIRE(!p.tp_overlap || p.tp > 1, ConfigError,
             "parallel.tp_overlap = true needs tensor parallelism: ", "parallel.tp (", p.tp,
             ") must be greater than 1 (there is no TP communication to hide)");
  keys.tp_grid = tp2d::parse(p.tp2d, p.tp);
  tp2d::check(keys.tp_grid,
              {p.sp, p.cp, p.pp, model.moe(), model.attention_dropout > 0 || model.hidden_dropout > 0,
               model.n_kv_heads, model.n_heads, model.ffn_hidden, p.tp_overlap});
  MT_REQUIRE(t.batch_size % (p.dp * t.microbatch_size) == 0, ConfigError, "train.batch_size (", t.batch_size,
             ") must be divisible by parallel.dp (", p.dp, ") x train.microbatch_size (", t.microbatch_size,
             ")");
  validate_pipeline(*this, keys);
  validate_moe_layout(*this, keys);
  validate_reduction(*this, keys);
  validate_cp_impl(*this, keys);
  check_dp_shard({p.dp_shard, p.dp, p.zero, p.ep, keys.reduction == Reduction::canonical});
  keys.dp_allreduce = parse_dp_allreduce(p.dp_allreduce);
  check_dp_allreduce({keys.dp_allreduce, p.dp, p.cp, p.zero, p.dp_shard, p.ep});
  keys.recompute = parse_recompute(t.recompute, t.recompute_modules);
  if (p.pp > 1) pp::check_split_schedule(keys.schedule, {p.tp, p.cp, model.moe(), keys.recompute.any()});
  parsed_ = std::move(keys);
  validated_ = true;
}

const ParsedKeys& Config::parsed() const {
  MT_CHECK(validated_, "Config::validate() has not run: the typed keys are not parsed yet");
  return parsed_;
}

std::vector<std::string> ineffective_keys(const Config& c) {
  const ParallelConfig& p = c.parallel;
  std::vector<std::string> notes;
  auto note = [&](const char* key, bool inert, const char* because, auto value) {
    if (!inert || !c.was_set(key)) return;
    std::ostringstream os;
    os << key << " has no effect with " << because << " = " << value;
    notes.push_back(os.str());
  };
  // Buckets group the ZeRO 0/1 gradient all-reduce; ZeRO 2/3 reduce-scatter unit by unit.
  note("parallel.bucket_mb", p.zero >= 2, "parallel.zero", p.zero);
  note("parallel.cp_impl", p.cp == 1, "parallel.cp", p.cp);
  note("parallel.schedule", p.pp == 1, "parallel.pp", p.pp);
  note("parallel.virtual_stages", p.pp == 1, "parallel.pp", p.pp);  // only 1 is valid there
  note("parallel.stage_layers", p.pp == 1, "parallel.pp", p.pp);
  note("train.eval_windows", c.train.eval_every == 0, "train.eval_every", c.train.eval_every);
  for (const char* key :
       {"model.moe_every", "model.top_k", "model.expert_ffn_hidden", "model.router_aux_loss_coef",
        "model.router_z_loss_coef", "model.capacity_factor", "model.router_bias_rate", "model.router_skew"})
    note(key, !c.model.moe(), "model.n_experts", c.model.n_experts);
  note("train.recompute_modules", c.train.recompute != "selective", "train.recompute", c.train.recompute);
  note("train.async_checkpoint", c.train.checkpoint_dir.empty(), "train.checkpoint_dir", "\"\"");
  for (const char* key : {"train.momentum", "train.nesterov"})
    note(key, c.train.optimizer != "sgd", "train.optimizer", c.train.optimizer);
  for (const char* key : {"train.beta1", "train.beta2", "train.adam_eps"})
    note(key, c.train.optimizer == "sgd", "train.optimizer", c.train.optimizer);
  return notes;
}

}  // namespace mt
