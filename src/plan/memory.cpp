#include "plan/memory.h"

#include <algorithm>
#include <cmath>

#include "plan/collectives.h"

namespace mt::plan {

PrecisionSizes precision_sizes(const std::string& precision) {
  if (precision == "bf16") return {2, 4, 12, 2};
  return {4, 4, 8, 4};
}

std::string precision_note(const std::string& precision) {
  if (precision == "bf16")
    return "memory assumes bf16 mixed precision: 2 B per parameter (bf16), 4 B per gradient (fp32), 12 B of "
           "optimizer state (fp32 master weight + two Adam moments), 2 B per activation element";
  return "memory assumes fp32 training as meshtrain runs here: 4 B per parameter, 4 B per gradient, 8 B of "
         "Adam "
         "state, 4 B per activation element";
}

namespace {
// Share of a dense layer's saved activations that the MLP's gate, up and
// product take (3·ffn of 5·d + q/k/v + 3·ffn floats per token,
// cost/memory_estimate.cpp's count): what selective recomputation, which
// recomputes the MLP's up-projections in the backward, does not keep.
double mlp_activation_share(const ModelConfig& m) {
  const double mlp = 3.0 * double(m.ffn_hidden);
  return mlp / (5.0 * double(m.d_model) + double(m.qkv_dim()) + mlp);
}

double scale_for(const std::string& category, const PrecisionSizes& s) {
  const auto has = [&](const char* w) { return category.find(w) != std::string::npos; };
  if (has("param")) return s.parameter / 4;
  if (has("grad")) return s.gradient / 4;
  if (has("state") || has("momentum") || has("optim")) return s.optimizer / 8;
  if (has("activ")) return s.activation / 4;
  return 1;  // logits, tables and buffers: kept in fp32
}

// hier: the trainer's model sizes the node shards (Σ over buckets of bucket / g, fp32, kept past the
// step) for g anywhere in [1, dp·cp], since a Config does not know the nodes, and its peak takes the
// smallest, g = dp·cp. The planner knows g (its placement): the shards are the flat layout's
// communication buffers subtracted, × dp·cp / g.
int64_t hier_node_shards_beyond_model(const PlanInput& in, const PlanLayout& l, const Machine& m,
                                      const MemoryEstimate& model, size_t comm_part) {
  PlanLayout flat = l;
  flat.hier_dp = false;
  const MemoryEstimate f = estimate_training_memory(to_config(in, flat), MemoryFigure::peak);
  if (comm_part >= f.parts.size()) return 0;
  const int64_t shards = model.parts[comm_part].second - f.parts[comm_part].second;
  const DpNodeSplit split = dp_node_split(l, m.devices_per_node);
  return std::max<int64_t>(0, shards) * (l.dp * l.cp / split.g - 1);
}
}  // namespace

MemoryEstimate plan_memory(const PlanInput& in, const PlanLayout& l, const Machine& m) {
  const Config c = to_config(in, l);  // HSDP: parallel.dp_shard, which the memory model sizes exactly
  // The model's peak, not its bound: the bound counts every pipeline gradient
  // send of a step as still on the wire at once (a step's microbatches ×
  // a residual: 100 GiB for the 1T row of docs/PLANNER.md), a limit for the
  // trainer's refusal, not a prediction. The peak is what the runs here
  // measure (docs/BENCHMARKS.md, "Planner validation").
  const MemoryEstimate fp32 = estimate_training_memory(c, MemoryFigure::peak);
  const PrecisionSizes sizes = precision_sizes(m.precision);
  MemoryEstimate e;
  e.rank = fp32.rank;  // the largest rank of the layout, as the trainer's model finds it
  for (size_t k = 0; k < fp32.parts.size(); ++k) {
    const auto& [name, bytes] = fp32.parts[k];
    double b = double(bytes) * scale_for(name, sizes);
    if (l.hier_dp && l.zero <= 1 && name.find("communication") != std::string::npos)
      b += double(hier_node_shards_beyond_model(in, l, m, fp32, k));
    if (l.recompute == Recompute::selective && name.find("activ") != std::string::npos)
      b *= 1.0 - mlp_activation_share(in.model);
    e.parts.emplace_back(name, static_cast<int64_t>(std::llround(b)));
    if (fp32.rank >= 0 && k < e.by_kind.size()) e.by_kind[k] = e.parts.back().second;
    e.total += e.parts.back().second;
  }
  return e;
}

}  // namespace mt::plan
