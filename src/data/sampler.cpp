#include "data/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/philox.h"

namespace mt {

namespace {

void require_tokens_for(const TokenFile& file, int64_t seq_len) {
  MT_REQUIRE(seq_len >= 1, ConfigError, "seq_len (", seq_len, ") must be >= 1");
  MT_REQUIRE(file.size() >= seq_len + 1, DataError, "token file ", file.path(), " has ", file.size(),
             " tokens, but seq_len ", seq_len, " needs at least seq_len + 1 = ", seq_len + 1);
}

}  // namespace

int64_t sample_offset(int64_t n_tokens, uint64_t seed, int64_t step, int64_t batch_size, int64_t seq_len,
                      int64_t row) {
  const int64_t n_starts = n_tokens - seq_len;  // valid offsets are [0, n_starts)
  MT_CHECK(n_starts >= 1 && step >= 0 && row >= 0 && row < batch_size);
  const PhiloxKey key = philox_key(seed, "data.sampler");
  const uint64_t index =
      static_cast<uint64_t>(step) * static_cast<uint64_t>(batch_size) + static_cast<uint64_t>(row);
  const double u = philox_uniform(key, index);  // [0, 1)
  // u * n_starts can round up to n_starts for very large files; clamp.
  const auto o = static_cast<int64_t>(std::floor(u * static_cast<double>(n_starts)));
  return std::min(o, n_starts - 1);
}

void sample_rows(const TokenFile& file, uint64_t seed, int64_t step, int64_t batch_size, int64_t seq_len,
                 int64_t row_begin, int64_t row_end, int32_t* inputs, int32_t* targets) {
  require_tokens_for(file, seq_len);
  MT_REQUIRE(batch_size >= 1, ConfigError, "batch_size (", batch_size, ") must be >= 1");
  MT_REQUIRE(step >= 0, ConfigError, "step (", step, ") must be >= 0");
  MT_REQUIRE(0 <= row_begin && row_begin <= row_end && row_end <= batch_size, ConfigError, "row range [",
             row_begin, ", ", row_end, ") must lie in [0, batch_size = ", batch_size, ")");
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t o = sample_offset(file.size(), seed, step, batch_size, seq_len, i);
    const int64_t r = i - row_begin;
    file.copy(o, seq_len, inputs + r * seq_len);
    file.copy(o + 1, seq_len, targets + r * seq_len);
  }
}

EvalWindows::EvalWindows(const TokenFile& file, int64_t seq_len) : file_(&file), seq_len_(seq_len) {
  require_tokens_for(file, seq_len);
  count_ = (file.size() - 1) / seq_len;
}

void EvalWindows::windows(int64_t first, int64_t n, int32_t* inputs, int32_t* targets) const {
  MT_REQUIRE(first >= 0 && n >= 0 && first + n <= count_, ConfigError, "eval windows [", first, ", ",
             first + n, ") must lie in [0, ", count_, ") for ", file_->path());
  for (int64_t w = 0; w < n; ++w) {
    const int64_t o = (first + w) * seq_len_;
    file_->copy(o, seq_len_, inputs + w * seq_len_);
    file_->copy(o + 1, seq_len_, targets + w * seq_len_);
  }
}

}  // namespace mt
