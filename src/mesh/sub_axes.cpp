#include "mesh/sub_axes.h"

#include "core/error.h"

namespace mt {

const char* sub_axis_name(SubAxis s) {
  switch (s) {
    case SubAxis::ep:
      return "ep";
    case SubAxis::ep_replicas:
      return "ep_replicas";
    case SubAxis::tp_c:
      return "tp_c";
    case SubAxis::tp_r:
      return "tp_r";
    case SubAxis::tp_kv:
      return "tp_kv";
    case SubAxis::pp_tied:
      return "pp_tied";
    case SubAxis::dp_shard:
      return "dp_shard";
    case SubAxis::dp_replicas:
      return "dp_replicas";
    case SubAxis::cp_a2a:
      return "cp_a2a";
    case SubAxis::cp_ring:
      return "cp_ring";
  }
  return "?";
}

AxisSet sub_axis_parent(SubAxis s) {
  switch (s) {
    case SubAxis::ep:
    case SubAxis::ep_replicas:
    case SubAxis::dp_shard:
    case SubAxis::dp_replicas:
      return axis_bit(Axis::dp) | axis_bit(Axis::cp);
    case SubAxis::tp_c:
    case SubAxis::tp_r:
    case SubAxis::tp_kv:
      return axis_bit(Axis::tp);
    case SubAxis::cp_a2a:
    case SubAxis::cp_ring:
      return axis_bit(Axis::cp);
    case SubAxis::pp_tied:
      break;
  }
  return axis_bit(Axis::pp);
}

bool sub_axis_built(SubAxis s, const MeshSizes& sizes, const SubAxisSizes& sub) {
  switch (s) {
    case SubAxis::ep:
    case SubAxis::ep_replicas:
      return sub.ep > 1;
    case SubAxis::tp_c:
    case SubAxis::tp_r:
      return sub.tp_rows > 1;
    case SubAxis::tp_kv:
      return sub.kv_replicas > 1;
    case SubAxis::dp_shard:
    case SubAxis::dp_replicas:
      return sub.shard_ranks > 0 && sub.shard_ranks < sizes.dp * sizes.cp;
    case SubAxis::cp_a2a:
    case SubAxis::cp_ring:
      return sub.cp_a2a > 1 && sub.cp_a2a < sizes.cp;
    case SubAxis::pp_tied:
      break;
  }
  return sub.tied_ends && sizes.pp > 1;
}

namespace {
void divides(const char* what, int part, const char* whole_name, int whole) {
  MT_REQUIRE(part >= 1 && whole % part == 0, ConfigError, "the mesh's sub-axis ", what, " (", part,
             ") must be at least 1 and divide ", whole_name, " (", whole, ")");
}
}  // namespace

void validate_sub_axes(const MeshSizes& sizes, const SubAxisSizes& sub) {
  divides("ep", sub.ep, "dp × cp", sizes.dp * sizes.cp);
  divides("tp_r (the 2-D grid's rows)", sub.tp_rows, "tp", sizes.tp);
  divides("tp_kv (ranks per kv head)", sub.kv_replicas, "tp", sizes.tp);
  if (sub.shard_ranks != 0)
    divides("dp_shard (ranks of a shard group)", sub.shard_ranks, "dp × cp", sizes.dp * sizes.cp);
  if (sub.cp_a2a != 0) divides("cp_a2a (ranks of a hybrid all-to-all group)", sub.cp_a2a, "cp", sizes.cp);
}

SubAxisSplit sub_axis_split(SubAxis s, int i, int n, const SubAxisSizes& sub) {
  switch (s) {
    case SubAxis::ep:
      return {i / sub.ep, i % sub.ep};
    case SubAxis::ep_replicas:
      return {i % sub.ep, i / sub.ep};
    case SubAxis::tp_c: {
      const int C = n / sub.tp_rows;
      return {i / C, i % C};
    }
    case SubAxis::tp_r: {
      const int C = n / sub.tp_rows;
      return {i % C, i / C};
    }
    case SubAxis::tp_kv:
      return {i / sub.kv_replicas, i};
    case SubAxis::dp_shard:
      return {i / sub.shard_ranks, i % sub.shard_ranks};
    case SubAxis::dp_replicas:
      return {i % sub.shard_ranks, i / sub.shard_ranks};
    case SubAxis::cp_a2a:
      return {i / sub.cp_a2a, i % sub.cp_a2a};
    case SubAxis::cp_ring:
      return {i % sub.cp_a2a, i / sub.cp_a2a};
    case SubAxis::pp_tied:
      break;
  }
  const bool ends = i == 0 || i == n - 1;
  return {ends ? 0 : 1, i, ends};
}

}  // namespace mt
