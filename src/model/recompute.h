// What the backward recomputes instead of keeping (train.recompute,
// train.recompute_modules; docs/MODEL.md "Recomputation"): nothing, a whole
// layer (its input only is kept), or the activations of chosen modules. Each
// activation a layer saves names the module that recomputes it
// (model/buffer_plan.h Entry::by), so the plan, the allocation and the memory
// model read one choice.
#pragma once

#include <string>

namespace mt {

// A module whose activations a selective choice may recompute (bits).
enum class RecomputeModule : unsigned {
  none = 0,       // an activation no module recomputes: kept unless the whole layer is recomputed
  attention = 1,  // the attention core: its output and logsumexp, from the kept q|k|v
  mlp = 2,        // the MLP activation: swiglu(gate, up), from the kept gate|up
  norms = 4,      // the two RMSNorms: their outputs and 1/rms, from the kept residual stream
};

struct Recompute {
  enum class Mode { none, full, selective };
  Mode mode = Mode::none;
  unsigned modules = 0;  // selective: RecomputeModule bits (at least one)

  static Recompute full_layer() { return {Mode::full, 0}; }
  bool full() const { return mode == Mode::full; }
  bool selective() const { return mode == Mode::selective; }
  bool any() const { return mode != Mode::none; }
  // Whether the backward recomputes an activation that module `m` makes.
  bool recomputes(RecomputeModule m) const {
    return full() || (selective() && (modules & static_cast<unsigned>(m)) != 0);
  }
  bool operator==(const Recompute&) const = default;
};

// train.recompute (none | full | selective, or true = full, false = none) and
// train.recompute_modules (read with selective: a comma-separated list of
// attention, mlp, norms); a ConfigError naming the bad value and the allowed ones.
Recompute parse_recompute(const std::string& mode, const std::string& modules);
// "none", "full" or "selective(attention,norms)".
std::string to_string(const Recompute& r);

}  // namespace mt
