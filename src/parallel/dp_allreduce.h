// The ZeRO 0/1 gradient all-reduce over the dp group (parallel.dp_allreduce;
// docs/PARALLELISM.md "The hierarchical all-reduce"):
//   flat          one all-reduce over the whole group: with the group across
//                 nodes, the transport's ring (or tree) carries every bucket
//                 over the slow link at the group's full size;
//   hierarchical  the group cut at the node boundaries (comm/nodes.h
//                 split_by_node, g ranks on each of n nodes): reduce-scatter
//                 inside the node, all-reduce of each 1/g shard across the
//                 nodes, all-gather inside — the link carries 1/g of the bytes
//                 a flat ring's node would send over it.
// Both give every rank the same sum; they group it differently (fp32 rounding
// apart, the derived parity bound). In the canonical mode both phases sum by
// SumOrder::tree, which is the canonical tree over the group when each node
// holds an aligned block of a power of two consecutive ranks
// (check_canonical_nodes): then hierarchical is bitwise flat.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/group.h"
#include "comm/nodes.h"
#include "core/tensor.h"

namespace mt {

enum class DpAllReduce { flat, hierarchical };
DpAllReduce parse_dp_allreduce(std::string_view name);
const char* dp_allreduce_name(DpAllReduce mode);

// The configuration's side of the rules (Config::validate): hierarchical needs
// a dp × cp group of more than one rank, ZeRO 0 or 1 (ZeRO 2/3 reduce-scatter:
// HSDP, parallel.dp_shard, keeps that inside a node), no HSDP and no expert
// parallelism (their reductions are over other groups). ConfigError by name.
struct DpAllReduceLayout {
  DpAllReduce mode = DpAllReduce::flat;
  int64_t dp = 1, cp = 1, zero = 0, dp_shard = 0, ep = 1;
};
void check_dp_allreduce(const DpAllReduceLayout& l);

// The canonical mode's rule on the split the nodes gave (split.node_of, per
// group rank its node): g ranks per node, g a power of two, node i holding
// ranks [i·g, (i+1)·g). ConfigError with the numbers otherwise.
void check_canonical_nodes(const NodeSplit& split, const std::string& axis);

// The hierarchical all-reduces of a step's buckets, f32 in place. Bucket k
// over buf[n] with g ranks per node and m = ⌊n / g⌋: the reduce-scatter of
// buf[0, g·m) inside the node into `shard` (m floats, to outlive the step),
// its all-reduce across the nodes, the all-gather back into buf inside the
// node, each launched when the one before has completed; the n − g·m < g
// elements left over are all-reduced over the whole group when the bucket is
// added, where a flat all-reduce would start. Every rank must issue the
// collectives of one communicator in one order, whatever its timing: bucket
// k's reduce-scatter starts only after bucket k − 1's all-gather has started,
// so the node sees RS 0, AG 0, RS 1, AG 1, … and the link AR 0, AR 1, ….
class HierarchicalAllReduces {
 public:
  HierarchicalAllReduces(Group& whole, NodeSplit& groups, SumOrder order)
      : whole_(&whole), groups_(&groups), order_(order) {}
  // Bucket `index` (the next one: 0, 1, … in the order added) is ready.
  void add(float* buf, int64_t n, float* shard, std::string label);
  // Makes progress on every bucket added; true once bucket `index` is done.
  bool test(size_t index);
  // Completes every bucket added, then forgets them (the next step adds anew).
  void wait_all();
  // m = ⌊n / g⌋, the shard each rank holds.
  static int64_t shard_numel(int64_t n, int g) { return n / g; }

 private:
  struct Op {
    float* buf = nullptr;
    float* shard = nullptr;
    int64_t m = 0;
    std::string label;
    int phase = -1;  // -1 not started, 0 reduce-scatter, 1 all-reduce across, 2 all-gather, 3 done
    Work work, tail;
  };
  void start(Op& op);
  void advance(Op& op);  // the next phase, once the current one has completed
  void poll();

  Group* whole_;
  NodeSplit* groups_;
  SumOrder order_;
  std::vector<std::unique_ptr<Op>> ops_;
};

}  // namespace mt
