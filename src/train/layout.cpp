#include "train/layout.h"

#include <cstdio>
#include <sstream>
#include <vector>

#include "comm/context.h"
#include "core/error.h"
#include "model/params.h"
#include "parallel/data_parallel.h"
#include "parallel/tp_plan.h"
#include "train/explain.h"
#include "train/flops.h"
#include "train/pipeline.h"

namespace mt {

namespace {
MeshSizes mesh_sizes(const ParallelConfig& p) {
  return {.dp = static_cast<int>(p.dp),
          .pp = static_cast<int>(p.pp),
          .cp = static_cast<int>(p.cp),
          .tp = static_cast<int>(p.tp)};
}
}  // namespace

RunLayout make_run_layout(const Config& cfg, const Group* world) {
  RunLayout lay;
  const MeshSizes sizes = mesh_sizes(cfg.parallel);
  validate_mesh(sizes, world ? world->size() : 1);
  lay.zero_ = static_cast<int>(cfg.parallel.zero);
  lay.bucket_bytes_ = static_cast<int64_t>(cfg.parallel.bucket_mb * (1 << 20));
  lay.dp = sizes.dp;
  lay.tp = sizes.tp;
  lay.sp = cfg.parallel.sp && lay.tp > 1;
  lay.cp_ring = cfg.parallel.cp_impl == "ring";
  lay.pp = sizes.pp;
  lay.cp = sizes.cp;
  lay.virtual_stages = static_cast<int>(cfg.parallel.virtual_stages);
  if (lay.pp * lay.virtual_stages > 1)
    lay.stages = split_stages(cfg.model.n_layers, lay.pp, lay.virtual_stages, cfg.parallel.stage_layers);
  else
    lay.stages = {StageRange{}};
  if (world == nullptr) return lay;
  lay.world_ = std::make_unique<Group>(*world);
  lay.world_size = world->size();
  lay.rank = world->rank();
  lay.mesh_ = std::make_unique<DeviceMesh>(*world, sizes);
  lay.dp_rank = lay.mesh_->coord(Axis::dp);
  // Gradients, the valid-token count and the loss are sums over the data: the
  // dp replicas and, with context parallelism, the cp shares of each sequence.
  lay.dp_group_ = std::make_unique<Group>(lay.mesh_->group(lay.cp > 1 ? "dp+cp" : "dp"));
  lay.cp_rank = lay.mesh_->coord(Axis::cp);
  if (lay.cp > 1) lay.cp_group_ = std::make_unique<Group>(lay.mesh_->group("cp"));
  lay.tp_rank = lay.mesh_->coord(Axis::tp);
  if (lay.tp > 1) lay.tp_group_ = std::make_unique<Group>(lay.mesh_->group("tp"));
  lay.tp_kv_group_ = tp::kv_replica_group(lay.tp_group_.get(), cfg.model.n_kv_heads);
  lay.pp_rank = lay.mesh_->coord(Axis::pp);
  if (lay.pp > 1) {
    lay.pp_group_ = std::make_unique<Group>(lay.mesh_->group("pp"));
    if (cfg.model.tie_embeddings) {  // the first and the last stage (collective over pp)
      const bool ends = lay.pp_rank == 0 || lay.pp_rank == lay.pp - 1;
      lay.tied_group_ = std::make_unique<Group>(lay.pp_group_->split(ends ? 0 : 1, lay.pp_rank, "pp_tied"));
      if (!ends) lay.tied_group_.reset();
    }
  }
  return lay;
}

std::unique_ptr<ParamStore> RunLayout::make_store(const Config& cfg, const StageRange& stage) const {
  if (!dp_group_ || (dp * cp == 1 && zero_ == 0)) return nullptr;
  DataParallelOptions o;
  o.zero = zero_;
  o.bucket_bytes = bucket_bytes_;
  const ParamTable table =
      make_param_table(cfg.model, {tp, tp_rank}, stage);  // this rank's tp shard of the stage
  return std::make_unique<DataParallelStore>(make_units(table, cfg.model), *dp_group_, o);
}

void RunLayout::sum_over_tp(double* v) {
  if (tp_group_) tp_group_->all_reduce(v, 1, "grad norm");
}

void RunLayout::sum_over_pp(double* v) {
  if (pp_group_) pp_group_->all_reduce(v, 1, "pp sum");
}

void RunLayout::sum_tied_embedding(ParamStore* store) {
  if (!tied_group_ || store == nullptr) return;
  int64_t n = 0;
  float* g = store->local_grad_of("model.embed_tokens.weight", &n);
  tied_group_->all_reduce(g, n, "tied embedding grads");
}

void RunLayout::set_step(int64_t step) {
  if (world_) world_->context().step = step;
}

void RunLayout::sum_over_dp(int64_t* v) {
  if (dp_group_ && dp * cp > 1) dp_group_->all_reduce(v, 1, "valid tokens");
}

void RunLayout::sum_over_dp(double* v) {
  if (dp_group_ && dp * cp > 1) dp_group_->all_reduce(v, 1, "loss");
}

double RunLayout::job_sgemm_gflops() {
  if (world_ && world_size > 1) world_->barrier("sgemm ceiling");
  double rate = measure_sgemm_gflops(1024, 0.3);
  if (world_ && world_size > 1) world_->all_reduce(&rate, 1, "sgemm ceiling");
  return rate;
}

std::map<std::string, int64_t> RunLayout::comm_bytes(int64_t step) const {
  std::map<std::string, int64_t> out;
  if (!world_) return out;
  for (const auto& [key, bytes] : world_->context().ledger.bytes_by_op_axis(step)) {
    out[key.first + "/" + key.second] = bytes;
  }
  return out;
}

std::string RunLayout::describe() const {
  std::ostringstream os;
  if (mesh_) {
    const std::string table = mesh_->table();
    os << table.substr(0, table.find('\n') + 1);  // the one-line summary; --print-mesh prints the whole map
  }
  os << "data parallel: dp = " << dp << ", zero = " << zero_ << "\n";
  if (cp > 1)
    os << "context parallel: cp = " << cp << " (zigzag, " << (cp_ring ? "ring" : "all-gather")
       << " attention)\n";
  if (tp > 1) os << "tensor parallel: tp = " << tp << ", sequence parallel " << (sp ? "on" : "off") << "\n";
  if (stages.size() > 1)
    os << "pipeline: pp = " << pp << ", " << virtual_stages << " virtual stage(s) per rank\n"
       << stage_map(stages, pp);
  return os.str();
}

std::string RunLayout::explain(int64_t step) {
  if (!world_) return "one process: no collectives in step " + std::to_string(step) + "\n";
  return explain_report(*world_, step);
}

std::string RunLayout::trace_json(const std::vector<PipeSpan>& spans) {
  if (!world_) return "";
  return pipeline_trace_json(*world_, rank, spans);
}

std::string RunLayout::comm_summary() const {
  return world_ ? world_->context().ledger.summary() : "";
}

double RunLayout::overlap_hidden(ParamStore& store) const {
  const auto* d = dynamic_cast<DataParallelStore*>(&store);
  return d ? d->overlap().hidden_fraction() : 0.0;
}

std::string RunLayout::memory_report(const MemStats& mine) {
  const int K = kNumMemKinds + 1;
  std::vector<int64_t> row(static_cast<size_t>(K)), all(static_cast<size_t>(K * world_size));
  for (int k = 0; k < kNumMemKinds; ++k)
    row[static_cast<size_t>(k)] = mine.peak[static_cast<size_t>(k)];
  row[static_cast<size_t>(kNumMemKinds)] = mine.total_peak;
  if (world_ && world_size > 1) {
    world_->all_gather(row.data(), all.data(), K, ElemType::i64, "memory report");
  } else {
    all = row;
  }
  std::ostringstream os;
  os << "peak memory per rank (MiB):\n  rank";
  for (int k = 0; k < kNumMemKinds; ++k) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " %11s", std::string(mem_kind_name(static_cast<MemKind>(k))).c_str());
    os << buf;
  }
  os << "       total\n";
  for (int r = 0; r < world_size; ++r) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "  %4d", r);
    os << buf;
    for (int k = 0; k < K; ++k) {
      std::snprintf(buf, sizeof buf, " %11.2f",
                    static_cast<double>(all[static_cast<size_t>(r * K + k)]) / (1 << 20));
      os << buf;
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace mt
