// Dropout's coordinates (docs/MODEL.md, "Dropout"): the keys of a step's
// masks and where the rows of a slot sit in the one-process batch.
#include "model/llama.h"
#include "model/llama_internal.h"

namespace mt {

DropoutKey Llama::dropout_at(int64_t gl, const char* site, double p) const {
  if (!drop_.on || p == 0) return {};
  return dropout_key(drop_.seed, drop_.step, gl, site, p);
}

const AttentionDropout* Llama::attention_dropout(int64_t gl, AttentionDropout* storage) const {
  const DropoutKey key = dropout_at(gl, "attn", cfg_.attention_dropout);
  if (!key.on) return nullptr;
  *storage = {key, cur_->d_seq_rows.data(), tpr_.rank * td_.heads};  // heads split in rank order
  return storage;
}

TokenCoords Llama::residual_coords() const {
  return {cur_->d_seq_resid.data(), cur_->d_pos_resid.data()};
}

void Llama::dropout_coords(Slot& sl) const {
  const int64_t B = sl.B, T = sl.T;
  sl.seq_rows.resize(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    sl.seq_rows[static_cast<size_t>(b)] = next_first_row_ + b;
  sl.seq_resid.resize(static_cast<size_t>(sl.Nl));
  sl.pos_resid.resize(static_cast<size_t>(sl.Nl));
  const int64_t first_token = sp_on() ? tpr_.rank * sl.Nl : 0;  // SP: this rank's block of the N tokens
  for (int64_t r = 0; r < sl.Nl; ++r) {
    sl.seq_resid[static_cast<size_t>(r)] = sl.seq_rows[static_cast<size_t>((first_token + r) / T)];
    sl.pos_resid[static_cast<size_t>(r)] = sl.pos[static_cast<size_t>(first_token + r)];
  }
}

}  // namespace mt
