// --fingerprint's reading of the model (parallel/probe.h): a tensor's rows at
// their global sequence and position (the slot's), its columns where the
// linear plan places them.
#include "model/llama_internal.h"

namespace mt {

void Llama::probe_record(int64_t gl, const char* name, bool grad, const float* v, ProbeRows rows,
                         const tp::LinearEntry* e, bool out) const {
  const std::vector<ColumnSpan> cols = plan_.columns(e, out, grad);
  int64_t ld = 0;
  for (const ColumnSpan& c : cols)
    ld = std::max(ld, c.local + c.width);
  const Slot& sl = *cur_;
  const RowCoords at = rows == ProbeRows::batch ? RowCoords{sl.seq_rows.data(), sl.pos.data(), sl.T}
                                                : RowCoords{sl.seq_resid.data(), sl.pos_resid.data(), 1};
  opts_.probe->record(gl, name, grad, v, rows == ProbeRows::batch ? sl.N : sl.Nl, ld, at, cols);
}

}  // namespace mt
