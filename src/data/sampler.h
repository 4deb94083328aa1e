// Training batches and evaluation windows over a token file.
//
// The global training batch of step s is a pure function of (seed, s): row i
// starts at a Philox-uniform offset (rule in docs/FORMATS.md, "Sampling").
// A data-parallel rank asks for its contiguous slice of rows [row_begin,
// row_end) and gets exactly those rows of the global batch, whatever the
// number of ranks.
#pragma once

#include <cstdint>

#include "data/token_file.h"

namespace mt {

// Start offset of row `row` of the global batch of `step`: an offset in
// [0, n_tokens - seq_len), so that the targets (shifted by one) stay inside
// the file.
int64_t sample_offset(int64_t n_tokens, uint64_t seed, int64_t step, int64_t batch_size, int64_t seq_len,
                      int64_t row);

// Rows [row_begin, row_end) of the global batch of `step`.
// inputs, targets: [row_end - row_begin, seq_len], row-major; for local row r
// (global row i = row_begin + r) with offset o = sample_offset(..., i):
//   inputs[r, t] = tokens[o + t], targets[r, t] = tokens[o + t + 1].
// Throws DataError when the file has fewer than seq_len + 1 tokens and
// ConfigError when a size or the row range is out of bounds.
void sample_rows(const TokenFile& file, uint64_t seed, int64_t step, int64_t batch_size, int64_t seq_len,
                 int64_t row_begin, int64_t row_end, int32_t* inputs, int32_t* targets);

// Consecutive, non-overlapping windows for evaluation: window w has
//   inputs  = tokens[w * T, w * T + T), targets = tokens[w * T + 1, w * T + T + 1),
// and there are (n_tokens - 1) / T windows (the last tokens that do not fill a
// window are not evaluated). The file must outlive this object.
class EvalWindows {
 public:
  // Throws DataError when the file is too short for one window.
  EvalWindows(const TokenFile& file, int64_t seq_len);

  int64_t count() const { return count_; }
  int64_t seq_len() const { return seq_len_; }

  // Windows [first, first + n) into inputs, targets: [n, seq_len].
  void windows(int64_t first, int64_t n, int32_t* inputs, int32_t* targets) const;

 private:
  const TokenFile* file_;
  int64_t seq_len_;
  int64_t count_;
};

}  // namespace mt
