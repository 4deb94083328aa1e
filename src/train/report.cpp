#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/context.h"
#include "core/file.h"
#include "core/memory.h"
#include "core/threads.h"
#include "cost/explain_memory.h"
#include "cost/flops.h"
#include "ops/gemm.h"
#include "parallel/data_parallel.h"
#include "train/explain.h"
#include "train/progress.h"
#include "train/run_support.h"

namespace mt {

namespace {
// "ring", "all-gather", "Ulysses all-to-all", "hybrid (all-to-all over 2, ring over 2)".
std::string cp_attention_words(const Config& cfg) {
  switch (cfg.parsed().cp_impl) {
    case cp::CpImpl::ring:
      return "ring";
    case cp::CpImpl::allgather:
      return "all-gather";
    case cp::CpImpl::ulysses:
      return "Ulysses all-to-all";
    case cp::CpImpl::hybrid:
      break;
  }
  const int64_t u = cfg.parallel.cp_ulysses;
  return "hybrid (all-to-all over " + std::to_string(u) + ", ring over " +
         std::to_string(cfg.parallel.cp / u) + ")";
}
}  // namespace

namespace {

std::string describe(const RunMesh& mesh, const Config& cfg, const TrainModel& model, bool mesh_printed) {
  std::ostringstream os;
  if (mesh.mesh() && !mesh_printed) {
    const std::string table = mesh.mesh()->table();
    os << table.substr(0, table.find('\n') + 1);  // the one-line summary; --print-mesh prints the whole map
  }
  os << "data parallel: dp = " << mesh.dp << ", zero = " << cfg.parallel.zero << "\n";
  if (mesh.ep > 1)
    os << "expert parallel: ep = " << mesh.ep << ", " << cfg.model.n_experts / mesh.ep
       << " experts per rank, each held by " << mesh.dp * mesh.cp / mesh.ep << " rank(s)\n";
  if (mesh.cp > 1)
    os << "context parallel: cp = " << mesh.cp << " (zigzag, " << cp_attention_words(cfg) << " attention)\n";
  if (mesh.tp > 1)
    os << "tensor parallel: tp = " << mesh.tp << ", sequence parallel " << (cfg.parallel.sp ? "on" : "off")
       << ", communication overlap " << (cfg.parallel.tp_overlap ? "on" : "off") << "\n";
  if (model.pipelined())
    os << "pipeline: pp = " << mesh.pp << ", " << cfg.parallel.virtual_stages
       << " virtual stage(s) per rank\n"
       << stage_map(model.stages, mesh.pp);
  return os.str();
}

// Σ bytes per "op/axis" in this step (this rank's view of its own calls).
nlohmann::json comm_bytes(const RunMesh& mesh, int64_t step) {
  nlohmann::json out = nlohmann::json::object();
  if (!mesh.world()) return out;
  for (const auto& [key, bytes] : mesh.world()->context().ledger.bytes_by_op_axis(step))
    out[key.first + "/" + key.second] = bytes;
  return out;
}

// ZeRO 0/1: the share of the gradient reduction's time hidden behind the backward.
double overlap_hidden(TrainModel& model) {
  const auto* d = dynamic_cast<DataParallelStore*>(&model.first().store());
  return d ? d->overlap().hidden_fraction() : 0.0;
}

// Each stage's idle share of the step (the bubble), gathered over pp.
std::vector<double> pp_idle(const RunMesh& mesh, const TrainModel& model) {
  std::vector<double> idle;
  if (!model.pipelined()) return idle;
  const pp::Executor& e = *model.executor;
  const double mine = e.wall_s() > 0 ? 1.0 - e.busy_s() / e.wall_s() : 0.0;
  idle.resize(static_cast<size_t>(mesh.pp));
  mesh.pp_group()->all_gather(&mine, idle.data(), 1, ElemType::f64, "pp idle");
  return idle;
}

// Peak bytes per category on every rank, as a table (collective over the
// world), with the process's resident memory now and at its peak beside the
// tracked total (core/memory.h resident_bytes).
std::string memory_report(const RunMesh& mesh, const MemStats& mine) {
  const int K = kNumMemKinds + 3;
  std::vector<int64_t> row(static_cast<size_t>(K)), all(static_cast<size_t>(K * mesh.world_size));
  for (int k = 0; k < kNumMemKinds; ++k)
    row[static_cast<size_t>(k)] = mine.peak[static_cast<size_t>(k)];
  row[static_cast<size_t>(kNumMemKinds)] = mine.total_peak;
  row[static_cast<size_t>(kNumMemKinds + 1)] = resident_bytes(false);
  row[static_cast<size_t>(kNumMemKinds + 2)] = resident_bytes(true);
  if (mesh.world() && mesh.world_size > 1)
    mesh.world()->all_gather(row.data(), all.data(), K, ElemType::i64, "memory report");
  else
    all = row;
  std::ostringstream os;
  os << "peak memory per rank (MiB):\n  rank";
  char buf[32];
  for (int k = 0; k < kNumMemKinds; ++k) {
    std::snprintf(buf, sizeof buf, " %12s", std::string(mem_kind_name(static_cast<MemKind>(k))).c_str());
    os << buf;
  }
  os << "        total          rss     rss_peak\n";
  for (int r = 0; r < mesh.world_size; ++r) {
    std::snprintf(buf, sizeof buf, "  %4d", r);
    os << buf;
    for (int k = 0; k < K; ++k) {
      std::snprintf(buf, sizeof buf, " %12.2f",
                    static_cast<double>(all[static_cast<size_t>(r * K + k)]) / (1 << 20));
      os << buf;
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace

void report_start(const RunMesh& mesh, const Config& cfg, const TrainModel& model, double sgemm_gflops,
                  const RunOptions& opts) {
  if (opts.quiet || mesh.rank != 0) return;
  if (mesh.world_size > 1) std::printf("%s", describe(mesh, cfg, model, opts.mesh_printed).c_str());
  int64_t num_params = 0;  // the whole model's
  for (const auto& s : make_param_table(cfg.model).specs)
    num_params += s.numel;
  std::printf(
      "model: %lld parameters (%lld in matrix products), %lld layers, d_model %lld; %d threads; "
      "MFU ceiling %.1f GFLOP/s (%s)\n",
      static_cast<long long>(num_params), static_cast<long long>(matmul_params(cfg.model)),
      static_cast<long long>(cfg.model.n_layers), static_cast<long long>(cfg.model.d_model), num_threads(),
      sgemm_gflops, matmul_ceiling_name());
  if (matmul_precision() == MatmulPrecision::bf16)
    std::printf("bf16 matmul: %s\n", bf16_kernel_description().c_str());
  std::fflush(stdout);
}

namespace {
// moe_max_load_over_mean: the rows the busiest ep coordinate's experts took this
// step (every MoE layer, every rank's tokens) over the mean of the ep
// coordinates, and moe_busiest_ep_rank, that coordinate (docs/PARALLELISM.md
// "Expert parallelism"). 1 with ep = 1.
void add_ep_load(nlohmann::json& j, const nlohmann::json& per_layer, int ep) {
  std::vector<int64_t> load(static_cast<size_t>(ep), 0);
  for (const auto& [layer, counts] : per_layer.items()) {
    const std::vector<int64_t> v = counts.get<std::vector<int64_t>>();
    for (size_t e = 0; e < v.size(); ++e)
      load[e / (v.size() / load.size())] += v[e];
  }
  int64_t total = 0;
  size_t busiest = 0;
  for (size_t r = 0; r < load.size(); ++r) {
    total += load[r];
    if (load[r] > load[busiest]) busiest = r;
  }
  const double mean = static_cast<double>(total) / static_cast<double>(ep);
  j["moe_max_load_over_mean"] = mean > 0 ? static_cast<double>(load[busiest]) / mean : 1.0;
  j["moe_busiest_ep_rank"] = busiest;
  j["moe_ep_load"] = load;  // rows per ep coordinate
}

// The log's load line under expert parallelism: each ep rank's rows over the
// mean, the busiest named with its excess (the congestion case, docs/BENCHMARKS.md).
void print_ep_load(const nlohmann::json& line) {
  if (!line.contains("moe_ep_load") || line["moe_ep_load"].size() < 2) return;
  const std::vector<int64_t> load = line["moe_ep_load"].get<std::vector<int64_t>>();
  double mean = 0;
  for (int64_t x : load)
    mean += static_cast<double>(x) / static_cast<double>(load.size());
  if (mean <= 0) return;
  const auto hot = line["moe_busiest_ep_rank"].get<size_t>();
  std::string text = "      moe load: hot ep rank " + std::to_string(hot);
  char buf[96];
  std::snprintf(buf, sizeof buf, " at %.2fx the mean (+%.0f%%) |", static_cast<double>(load[hot]) / mean,
                100.0 * (static_cast<double>(load[hot]) / mean - 1.0));
  text += buf;
  for (size_t r = 0; r < load.size(); ++r) {
    std::snprintf(buf, sizeof buf, " ep rank %zu %lld rows (%.2fx)", r, static_cast<long long>(load[r]),
                  static_cast<double>(load[r]) / mean);
    text += buf;
  }
  std::printf("%s\n", text.c_str());
}

// The step's mixture-of-experts metrics (docs/MODEL.md "Mixture of experts"):
// none for a dense model, so its lines are unchanged. Summed over the world:
// each rank counts its tokens in its stage's MoE layers (tp ranks without SP
// repeat tp rank 0's, which alone counts them); every rank holds its dp
// replica's losses (the microbatches' totals), so their mean over the world is
// the mean over dp.
void add_moe_metrics(nlohmann::json& j, TrainModel& model, const RunMesh& mesh) {
  if (model.chunks.empty() || !model.chunks.front()->config().moe()) return;
  const ModelConfig& cfg = model.chunks.front()->config();
  const int64_t E = cfg.n_experts;
  std::vector<int64_t> counts(static_cast<size_t>(cfg.n_layers * E + 1), 0);  // [layer][E], then dropped
  const MoeStats& first = model.chunks.front()->moe_stats();
  double sums[2] = {first.aux_loss, first.z_loss}, margin = std::numeric_limits<double>::infinity();
  for (const auto& chunk : model.chunks) {
    const MoeStats& st = chunk->moe_stats();
    margin = std::min(margin, st.min_topk_margin);
    if (!st.token_owner) continue;
    for (size_t i = 0; i < st.layers.size(); ++i)
      std::copy(st.tokens_per_expert[i].begin(), st.tokens_per_expert[i].end(),
                counts.begin() + static_cast<std::ptrdiff_t>(st.layers[i] * E));
    counts.back() += st.dropped;
  }
  Group* world = mesh.world_size > 1 ? mesh.world() : nullptr;
  if (world != nullptr) {
    world->all_reduce(counts.data(), static_cast<int64_t>(counts.size()), "moe metrics");
    world->all_reduce(sums, 2, "moe metrics");
    for (double& x : sums)
      x /= static_cast<double>(mesh.world_size);
    double neg = -margin;
    world->all_reduce(&neg, 1, "moe metrics", ReduceOp::max);
    margin = -neg;
  }
  nlohmann::json per_layer = nlohmann::json::object();
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    if (!cfg.is_moe_layer(l)) continue;
    const auto at = counts.begin() + static_cast<std::ptrdiff_t>(l * E);
    per_layer[std::to_string(l)] = std::vector<int64_t>(at, at + E);
  }
  j["moe_tokens_per_expert"] = per_layer;  // {"layer": [tokens routed to each expert]}
  add_ep_load(j, per_layer, mesh.ep);
  j["moe_aux_loss"] = sums[0];
  j["moe_z_loss"] = sums[1];
  j["moe_dropped_tokens"] = counts.back();
  j["moe_min_topk_margin"] = std::isfinite(margin) ? nlohmann::json(margin) : nlohmann::json(nullptr);
}
}  // namespace

void report_step(MetricsWriter& metrics, const RunMesh& mesh, TrainModel& model, const StepStats& s,
                 const TrainConfig& tc, const RunOptions& opts) {
  const bool lead = mesh.rank == 0;
  const MemStats mem = MemoryTracker::stats();
  nlohmann::json mem_by_kind = nlohmann::json::object();
  for (int k = 0; k < kNumMemKinds; ++k)
    mem_by_kind[std::string(mem_kind_name(static_cast<MemKind>(k)))] = mem.peak[static_cast<size_t>(k)];
  const nlohmann::json comm = comm_bytes(mesh, s.step);
  const double hidden = overlap_hidden(model);
  nlohmann::json line = {{"step", s.step},
                         {"pp_idle", pp_idle(mesh, model)},
                         {"comm_bytes", comm},
                         {"overlap_hidden", hidden},
                         {"mem_peak_by_kind", mem_by_kind},
                         {"loss", s.loss},
                         {"lr", s.lr},
                         {"grad_norm", s.grad_norm},
                         {"tokens", s.tokens},
                         {"step_time_s", s.step_time_s},
                         {"tokens_per_s", s.tokens_per_s},
                         {"mfu", s.mfu},
                         {"mfu_ceiling_gflops", s.mfu_ceiling_gflops},
                         {"mfu_ceiling", s.mfu_ceiling},
                         {"mem_peak_bytes", s.mem_peak_bytes},
                         {"rss_bytes", resident_bytes(false)},
                         {"rss_peak_bytes", resident_bytes(true)},
                         {"skipped", s.skipped}};
  add_moe_metrics(line, model, mesh);
  metrics.write(line);
  if (!opts.quiet && lead && s.first_estimate && s.step + 1 < tc.steps) {
    std::printf("time estimate: %s more for the remaining %lld steps (at the mean time of the first two)\n",
                format_duration(s.eta_s).c_str(), static_cast<long long>(tc.steps - s.step - 1));
  }
  if (!opts.quiet && lead && (s.step % tc.log_every == 0 || s.step + 1 == tc.steps)) {
    std::printf(
        "step %5lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | MFU %.2f of %.1f GFLOP/s (%s) | "
        "peak mem %.1f MiB | eta %s%s\n",
        static_cast<long long>(s.step), s.loss, s.lr, s.grad_norm, s.tokens_per_s, s.mfu,
        s.mfu_ceiling_gflops, s.mfu_ceiling, static_cast<double>(s.mem_peak_bytes) / (1 << 20),
        format_duration(s.eta_s).c_str(), s.skipped ? " | SKIPPED" : "");
    print_ep_load(line);
    std::fflush(stdout);
  }
  if (opts.explain && s.step == 0) {  // collective: every rank's calls of the first step, rank 0 prints
    const std::string report =
        mesh.world() ? explain_report(*mesh.world(), 0) : "one process: no collectives in step 0\n";
    if (lead) {
      std::printf("--explain: the linear plan of rank 0 (docs/ARCHITECTURE.md \"The linear plan\")\n%s",
                  model.chunks.front()->linear_plan().explain().c_str());
      std::printf("--explain: every collective of step 0, rank by rank\n%s", report.c_str());
      std::fflush(stdout);
    }
  }
}

void report_validation(MetricsWriter& metrics, const RunMesh& mesh, int64_t step, double loss,
                       const RunOptions& opts) {
  metrics.write({{"step", step}, {"val_loss", loss}});
  if (!opts.quiet && mesh.rank == 0)
    std::printf("step %5lld | val loss %.4f\n", static_cast<long long>(step), loss);
}

namespace {
// Rank 0's time blocked by the checkpoints (ckpt/checkpoint_async.h).
void report_saves(const RunResult& r, bool async) {
  double blocked = 0, most = 0, written = 0;
  for (size_t i = 0; i < r.save_blocked_s.size(); ++i) {
    blocked += r.save_blocked_s[i];
    most = std::max(most, r.save_blocked_s[i]);
    written += r.save_write_s[i];
  }
  const double n = static_cast<double>(r.save_blocked_s.size());
  std::printf(
      "checkpoints: %zu saved (%s); training blocked %.3f s per save on average (at most %.3f s), "
      "writes %.3f s on average\n",
      r.save_blocked_s.size(), async ? "async" : "sync", blocked / n, most, written / n);
}
// The share of this rank's tp communication time that ran behind compute:
// 1 − Σ wait / Σ (start → completion) over the run's tp calls (ledger entries
// of axis "tp"). Blocking calls count as all waited; parallel.tp_overlap's
// chunked calls overlap their GEMMs (docs/PARALLELISM.md).
std::string tp_hidden_line(const RunMesh& mesh) {
  double total = 0, waited = 0;
  int64_t calls = 0;
  for (const LedgerEntry& e : mesh.world()->context().ledger.entries()) {
    if (e.axis != "tp") continue;
    total += e.seconds;
    waited += std::min(e.wait_seconds, e.seconds);
    ++calls;
  }
  char line[200];
  std::snprintf(
      line, sizeof line,
      "tp communication (rank 0): %lld calls, %.3f s, %.3f s waited: %.0f%% hidden behind compute\n",
      static_cast<long long>(calls), total, waited, total > 0 ? 100 * (1 - waited / total) : 0.0);
  return line;
}

}  // namespace

void report_end(const RunMesh& mesh, const Config& cfg, TrainModel& model, const RunOptions& opts,
                RunResult& result) {
  if (opts.profile) {
    const KernelTimes& kt = model.first().kernel_times();
    for (int k = 0; k < static_cast<int>(Kernel::count_); ++k)
      result.kernel_seconds.emplace_back(kernel_name(static_cast<Kernel>(k)),
                                         kt.seconds[static_cast<size_t>(k)]);
  }
  result.memory = MemoryTracker::stats();
  result.overlap_hidden = overlap_hidden(model);
  const bool lead = mesh.rank == 0;
  if (opts.explain_memory) {  // also under --quiet: it is what was asked for
    const std::string table = explain_memory(mesh.world(), cfg, result.memory);  // collective
    if (lead) std::printf("%s", table.c_str());
  }
  if (opts.quiet) return;
  const std::string report = memory_report(mesh, result.memory);  // collective
  if (lead) std::printf("%s", report.c_str());
  if (lead && mesh.world_size > 1) std::printf("%s", mesh.world()->context().ledger.summary().c_str());
  if (lead && mesh.dp > 1 && cfg.parallel.zero <= 1) {
    std::printf("gradient all-reduce: %.0f%% of its time hidden behind the backward (last step)\n",
                100 * result.overlap_hidden);
    // Why the share is low when every core computes (docs/PARALLELISM.md, "Overlap of the gradient
    // all-reduce"). The machine's cores: a rank bound to a core sees only that one (hardware_threads).
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    if (cores > 0 && opts.local_ranks * num_threads() >= cores && result.overlap_hidden < 0.5)
      std::printf(
          "  (%d ranks x %d threads on %d cores: every core runs the backward, and the reduction's copies "
          "run on those same cores, inside MPI calls between the kernels, so little of it can hide; other "
          "work on the machine takes cores too)\n",
          opts.local_ranks, num_threads(), cores);
  }
  if (lead && mesh.tp > 1) std::printf("%s", tp_hidden_line(mesh).c_str());
  if (lead && !result.save_blocked_s.empty()) report_saves(result, cfg.train.async_checkpoint);
}

}  // namespace mt
