// The pure half of redistribute: which collective, over which axis, in which
// order (no communication here).
#include "core/error.h"
#include "mesh/redistribute.h"

namespace mt {

const char* redist_op_name(RedistOp op) {
  switch (op) {
    case RedistOp::copy:
      return "copy";
    case RedistOp::all_reduce:
      return "all_reduce";
    case RedistOp::reduce_scatter:
      return "reduce_scatter";
    case RedistOp::all_gather:
      return "all_gather";
    case RedistOp::all_to_all:
      return "all_to_all";
    case RedistOp::local_slice:
      return "local_slice";
  }
  return "?";
}

RedistOp redist_op_for(const Placement& from, const Placement& to) {
  if (from == to) return RedistOp::copy;
  MT_REQUIRE(!to.is_partial(), Error, "redistribute: ", from.to_string(),
             " → P is not a change of layout meshtrain makes (which rank would keep the value?)");
  if (from.is_partial()) return to.is_replicate() ? RedistOp::all_reduce : RedistOp::reduce_scatter;
  if (from.is_shard()) return to.is_replicate() ? RedistOp::all_gather : RedistOp::all_to_all;
  return RedistOp::local_slice;  // Replicate → Shard
}

namespace {

// Position of an axis in rank order (0 = outermost).
int nesting(Axis a) {
  for (int i = 0; i < kNumAxes; ++i) {
    if (kRankOrder[static_cast<size_t>(i)] == a) return i;
  }
  return -1;
}

// A step on `axis` over the current layout needs no axis inside it to shard
// the same dim (the step would otherwise see interleaved rows).
void check_nesting(const Layout& cur, const RedistStep& step, const std::optional<MeshSizes>& sizes) {
  for (int dim : {step.from.dim(), step.to.dim()}) {
    if (dim < 0) continue;
    for (Axis inner : kRankOrder) {
      if (nesting(inner) <= nesting(step.axis) || !cur.placement(inner).is_shard(dim)) continue;
      if (sizes && (*sizes)[inner] == 1) continue;
      MT_THROW(Error, "redistribute ", cur.to_string(), ": changing ", axis_name(step.axis), " from ",
               step.from.to_string(), " to ", step.to.to_string(), " while ", axis_name(inner),
               " (inside it) also shards dim ", dim, " is not supported; change ", axis_name(inner),
               " first");
    }
  }
}

}  // namespace

std::vector<RedistStep> plan_redistribute(const Layout& from, const Layout& to,
                                          const std::optional<MeshSizes>& sizes) {
  from.validate();
  to.validate();
  MT_REQUIRE(from.shape == to.shape, ConfigError, "redistribute: global shapes differ: ", from.to_string(),
             " vs ", to.to_string());
  MT_REQUIRE(from.order.empty() && to.order.empty(), Error, "redistribute ", from.to_string(), " → ",
             to.to_string(), ": layouts with a split order are not supported yet");
  std::vector<RedistStep> steps;
  Layout cur = from;
  auto add = [&](Axis a) {
    RedistStep step{a, cur.placement(a), to.placement(a), redist_op_for(cur.placement(a), to.placement(a))};
    check_nesting(cur, step, sizes);
    steps.push_back(step);
    cur = cur.with(a, step.to);
  };
  // Changes that do not end in a shard: innermost axis first.
  for (auto it = kRankOrder.rbegin(); it != kRankOrder.rend(); ++it) {
    if (from.placement(*it) != to.placement(*it) && !to.placement(*it).is_shard()) add(*it);
  }
  // Changes that end in a shard: outermost axis first.
  for (Axis a : kRankOrder) {
    if (from.placement(a) != to.placement(a) && to.placement(a).is_shard()) add(a);
  }
  return steps;
}

std::string describe_redistribute(const Layout& from, const Layout& to) {
  const std::vector<RedistStep> steps = plan_redistribute(from, to);
  if (steps.empty()) return "copy (no change)";
  std::string s;
  for (const RedistStep& step : steps) {
    if (!s.empty()) s += "\n";
    s += std::string(redist_op_name(step.op)) + " over " + axis_name(step.axis) + " (" +
         step.from.to_string() + " → " + step.to.to_string() + ")";
  }
  return s;
}

}  // namespace mt
