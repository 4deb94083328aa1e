#include "parallel/dp_allreduce.h"

#include "core/error.h"
#include "ops/primitives.h"

namespace mt {

DpAllReduce parse_dp_allreduce(std::string_view name) {
  if (name == "flat") return DpAllReduce::flat;
  if (name == "hierarchical") return DpAllReduce::hierarchical;
  MT_THROW(ConfigError, "parallel.dp_allreduce ('", name, "') must be flat or hierarchical");
}

const char* dp_allreduce_name(DpAllReduce mode) {
  return mode == DpAllReduce::hierarchical ? "hierarchical" : "flat";
}

void check_dp_allreduce(const DpAllReduceLayout& l) {
  if (l.mode == DpAllReduce::flat) return;
  MT_REQUIRE(l.dp * l.cp > 1, ConfigError,
             "parallel.dp_allreduce = hierarchical needs a gradient all-reduce: ", "parallel.dp (", l.dp,
             ") x parallel.cp (", l.cp, ") is 1");
  MT_REQUIRE(l.zero <= 1, ConfigError, "parallel.dp_allreduce = hierarchical cuts the ZeRO 0/1 all-reduce; ",
             "parallel.zero (", l.zero,
             ") reduce-scatters instead (parallel.dp_shard, HSDP, keeps that inside a node)");
  MT_REQUIRE(l.dp_shard == 0 || l.dp_shard == l.dp, ConfigError,
             "parallel.dp_allreduce = hierarchical with parallel.dp_shard (", l.dp_shard, ") < parallel.dp (",
             l.dp, "): HSDP's reduction is over its own groups (not built together)");
  MT_REQUIRE(l.ep == 1, ConfigError, "parallel.dp_allreduce = hierarchical with parallel.ep (", l.ep,
             "): the experts' gradients are summed over their replicas only (not built together)");
}

void check_canonical_nodes(const NodeSplit& split, const std::string& axis) {
  const int g = split.node_ranks.front();
  bool aligned = (g & (g - 1)) == 0;
  for (size_t r = 0; r < split.node_of.size(); ++r)
    aligned = aligned && split.node_of[r] == static_cast<int>(r) / g;
  MT_REQUIRE(aligned, ConfigError,
             "parallel.dp_allreduce = hierarchical in the canonical mode needs each node to ",
             "hold an aligned block of a power of two consecutive ", axis, " ranks, so that the node's ",
             "reduce-scatter is a subtree of the canonical tree; here ", g, " ranks per node, ",
             "not in consecutive blocks or not a power of two (--placement nodes gives blocks)");
}

void HierarchicalAllReduces::add(float* buf, int64_t n, float* shard, std::string label) {
  auto op = std::make_unique<Op>();
  op->buf = buf;
  op->shard = shard;
  op->m = shard_numel(n, groups_->node.size());
  op->label = std::move(label);
  const int64_t body = op->m * groups_->node.size();
  if (body < n)
    op->tail = whole_->all_reduce_async(buf + body, n - body, ElemType::f32, order_, op->label + " tail");
  MT_CHECK(op->m == 0 || shard != nullptr, "a hierarchical all-reduce needs its shard buffer");
  ops_.push_back(std::move(op));
  poll();
}

void HierarchicalAllReduces::start(Op& op) {
  op.phase = 0;
  if (op.m == 0) {
    op.phase = 3;
    return;
  }
  Group& node = groups_->node;
  op.work = node.reduce_scatter_async(op.buf, op.shard, op.m, ElemType::f32, order_, op.label + " (node)");
}

void HierarchicalAllReduces::advance(Op& op) {
  if (op.phase == 0) {
    Group& across = groups_->across;
    op.work = across.all_reduce_async(op.shard, op.m, ElemType::f32, order_, op.label + " (across)");
  } else if (op.phase == 1) {
    Group& node = groups_->node;
    // In place: this rank's shard at its block of the bucket.
    float* mine = op.buf + static_cast<int64_t>(node.rank()) * op.m;
    copy_rows(mine, op.m, op.shard, op.m, 1, op.m);
    op.work = node.all_gather_async(mine, op.buf, op.m, ElemType::f32, op.label + " (node)");
  }
  op.phase += 1;
}

void HierarchicalAllReduces::poll() {
  for (size_t k = 0; k < ops_.size(); ++k) {
    Op& op = *ops_[k];
    if (op.phase < 0) {
      if (k > 0 && ops_[k - 1]->phase < 2) return;  // the node's collectives stay in bucket order
      start(op);
    }
    while (op.phase < 3 && op.work.test())
      advance(op);
  }
}

bool HierarchicalAllReduces::test(size_t index) {
  poll();
  Op& op = *ops_.at(index);
  return op.phase == 3 && op.tail.test();
}

void HierarchicalAllReduces::wait_all() {
  for (auto& p : ops_) {
    Op& op = *p;
    if (op.phase < 0) start(op);  // the buckets before it are done
    while (op.phase < 3) {
      op.work.wait();
      advance(op);
    }
    op.tail.wait();
  }
  ops_.clear();
}

}  // namespace mt
