// Changes of layout. Each changed mesh axis is one step, and each step is the
// collective that DESIGN §1 derives from the change of placement:
//
//   from → to              op               over the axis's group
//   Partial  → Replicate   all_reduce
//   Partial  → Shard(d)    reduce_scatter
//   Shard(d) → Replicate   all_gather
//   Shard(d) → Shard(e)    all_to_all
//   Replicate→ Shard(d)    local slice      (no communication)
//   same     → same        copy             (no communication)
//
// Replicate/Shard → Partial is not a change we make (it would need a choice of
// which rank keeps the value); it throws. Shards along dims other than 0 are
// packed into contiguous blocks around the collective (any rank of tensor).
// Steps run innermost axis first for changes that remove a shard, then
// outermost first for changes that add one, so nested shards of one dim stay
// well defined; a step whose dim is also sharded by an axis inside it throws.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/layout.h"

namespace mt {

class DeviceMesh;

enum class RedistOp { copy, all_reduce, reduce_scatter, all_gather, all_to_all, local_slice };
const char* redist_op_name(RedistOp op);  // "all_reduce", …, "local_slice", "copy"

// The collective for one axis's change of placement (the table above).
// Throws Error for a change into Partial.
RedistOp redist_op_for(const Placement& from, const Placement& to);

struct RedistStep {
  Axis axis;
  Placement from, to;
  RedistOp op;
};

// The steps, in execution order; empty when the layouts are equal. Axes of
// size 1 (when `sizes` are known) cost no collective but are still listed.
// Throws ConfigError when the global shapes differ or a placement is invalid.
std::vector<RedistStep> plan_redistribute(const Layout& from, const Layout& to,
                                          const std::optional<MeshSizes>& sizes = std::nullopt);

// One line per changed axis, for --explain: "all_reduce over tp (P → R)",
// "all_to_all over tp (S(0) → S(1))"; "copy (no change)" when nothing changes.
std::string describe_redistribute(const Layout& from, const Layout& to);

// out ← the tensor laid out as `from` (this rank's piece `in`), laid out as
// `to`. `in` holds local_numel(from) floats, `out` local_numel(to); they must
// not overlap. Collective over the groups of the changed axes: every rank of
// the mesh calls it with the same layouts. `label` names the call site in the
// comm ledger. Padding that a step creates (slice, reduce-scatter,
// all-to-all) is zero; padding along axes that do not change is copied as is.
void redistribute(const float* in, float* out, const Layout& from, const Layout& to, const DeviceMesh& mesh,
                  std::string_view label);

}  // namespace mt
