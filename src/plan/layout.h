// One candidate layout of the planner: the mesh axes, cp's attention, the ZeRO
// stage, the microbatch, virtual stages, recomputation and HSDP's shard group,
// written and read as "dp8,tp8,pp4,cp4,hybrid2,ep1,zero1,mbs1,v2,sp,recompute=full,shard8"
// (docs/PLANNER.md, "Layouts"), the dp all-reduce ("hier") and the order in
// which a node is filled ("inner=cp": the trainer's --placement nodes:cp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "mesh/mesh_shape.h"
#include "parallel/context_parallel.h"

namespace mt::plan {

enum class Recompute { none, selective, full };

struct PlanLayout {
  int64_t dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
  int64_t zero = 0;
  int64_t mbs = 1;  // sequences per microbatch
  int64_t v = 1;    // model chunks per pipeline rank (interleaved schedule when > 1)
  bool sp = false;  // sequence parallelism over tp
  Recompute recompute = Recompute::none;
  // HSDP: ZeRO shards state over groups of `shard` dp ranks and replicates
  // it over dp / shard of them (0: shard = dp, plain ZeRO).
  int64_t shard = 0;
  // The zero-bubble H1 schedule (parallel.schedule = zbh1) in place of 1f1b:
  // v = 1, pp > 1, and what the split backward runs with (tp, cp 1, dense, no
  // recomputation; pipeline/schedule.h check_split_schedule).
  bool zb = false;
  // cp's attention (parallel.cp_impl): ring, ulysses (all-to-all over all cp
  // ranks) or hybrid (all-to-all inside groups of cp_a2a consecutive cp ranks,
  // the ring across the cp / cp_a2a groups: parallel.cp_ulysses);
  // parallel/cp_ulysses.h. The all-gather variant is not planned.
  cp::CpImpl cp_impl = cp::CpImpl::ring;
  int64_t cp_a2a = 0;  // hybrid only: the all-to-all group size U, 1 < U < cp dividing cp
  // The ZeRO 0/1 gradient all-reduce over dp × cp cut at the nodes (parallel.dp_allreduce =
  // hierarchical, parallel/dp_allreduce.h) instead of one flat all-reduce; the trainer's rules:
  // dp · cp > 1, ZeRO 0/1, no HSDP, ep 1, and the same number of the group's ranks on every node.
  bool hier_dp = false;
  // The mesh axes a node is filled with innermost, in this order, before the
  // others in the default order tp, cp, pp, dp (the trainer's --placement
  // nodes:AXES; plan/node_order.h). Empty: the default, the mesh's rank order.
  // Kept as short as it can be (parse_node_order), so equal orders compare equal.
  std::vector<Axis> inner = {};

  int64_t devices() const { return dp * tp * pp * cp; }
  // Ranks of cp's all-to-all (1: none) and of its ring (1: none); their product is cp.
  int64_t cp_a2a_size() const {
    return cp_impl == cp::CpImpl::ulysses ? cp : cp_impl == cp::CpImpl::hybrid ? cp_a2a : 1;
  }
  int64_t cp_ring_size() const { return cp / std::max<int64_t>(1, cp_a2a_size()); }
  int64_t shard_size() const { return shard > 0 ? shard : dp; }
  int64_t replicas() const { return dp / shard_size(); }
};

const char* recompute_name(Recompute r);
// The layout token of cp's attention: "ring", "ulysses", "hybrid2".
std::string cp_attention_name(const PlanLayout& l);
// The whole layout; cp's attention is written when cp > 1, the node order when
// it is not the default.
std::string to_string(const PlanLayout& l);

// Which fields a spec set; parse_layout fills only those.
struct LayoutSpec {
  PlanLayout layout;
  bool has_dp = false, has_tp = false, has_pp = false, has_cp = false, has_ep = false, has_zero = false,
       has_mbs = false, has_v = false, has_sp = false, has_recompute = false, has_shard = false,
       has_zb = false, has_cp_impl = false, has_hier = false, has_inner = false;
  bool complete() const { return has_dp && has_tp && has_pp && has_cp; }
};
// "dp2,tp1,..." (fields in any order; a ConfigError names a bad field).
LayoutSpec parse_layout(const std::string& text);

// What the planner is asked: the model and the step's shape.
struct PlanInput {
  ModelConfig model;
  int64_t devices = 1;
  int64_t global_batch = 1;  // sequences per step
  int64_t seq_len = 1;
  bool flash_attention = true;  // false: the attention scores are materialised (Megatron-LM in 2021)
  // false: the gradient reduction starts after the backward pass (Megatron-LM's
  // local DDP in 2021) instead of overlapping it.
  bool grad_overlap = true;
};

// The trainer's Config of this layout (what `meshtrain train` would run);
// HSDP's shard group is parallel.dp_shard, cp's attention parallel.cp_impl
// and parallel.cp_ulysses, hier parallel.dp_allreduce; the planner's selective
// recomputation, its own analytic form, maps to no recomputation. Validated
// (Config::validate: ConfigError naming the rule it breaks).
Config to_config(const PlanInput& in, const PlanLayout& l);

// ConfigError naming the rule when `l` cannot run `in`: the trainer's own
// start-up rules (Config::validate, which names Ulysses's head rule and
// hier's, check_dp_allreduce) and the planner's (devices, the shard group, a
// cp attention that cp 1 has not). hier's nodes: check_hier_nodes
// (plan/collectives.h), which needs the machine.
void check_layout(const PlanInput& in, const PlanLayout& l);

}  // namespace mt::plan
