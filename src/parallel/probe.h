// What `train --fingerprint` reads of the model (docs/FINGERPRINT.md): each
// activation and gradient the model hands between its sites, with the global
// coordinates of its local rows and columns. The model calls record() with a
// buffer and coordinates it takes from its slot (rows) and the linear plan
// (columns, LinearPlan::columns); it names no layout itself. A probe reads and
// never writes: with one installed the run computes the same bits.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace mt {

// Local columns [local, local + width) of a buffer are the global tensor's
// columns [global, global + width).
// block: which fused block of a site's output (q, k, v of q|k|v; gate, up),
// −1 for a tensor of one block. partial: the local columns are an addend of
// the global ones, not yet summed over the ranks holding them (a replicated
// kv head's gradient before the replicas' sum); not placed.
struct ColumnSpan {
  int64_t local = 0, global = 0, width = 0;
  int block = -1;
  bool partial = false;
};

// Where each local row of a buffer sits in the step's global batch: row r is
// position pos[r] of global sequence seq[r / per_seq] (per_seq: the local
// tokens of a sequence for a microbatch's rows [B·T], 1 for residual-stream
// rows that carry their own sequence index).
struct RowCoords {
  const int64_t* seq = nullptr;
  const int32_t* pos = nullptr;
  int64_t per_seq = 1;
};

class ActivationProbe {
 public:
  virtual ~ActivationProbe() = default;
  // Tensor `name` of model layer `layer` (−1: the embedding; n_layers: the
  // head), backward when `grad`: v [rows, ld] row-major, its columns as `cols`.
  virtual void record(int64_t layer, std::string_view name, bool grad, const float* v, int64_t rows,
                      int64_t ld, const RowCoords& at, const std::vector<ColumnSpan>& cols) = 0;
};

}  // namespace mt
