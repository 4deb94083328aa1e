#include "train/evaluate.h"

#include <algorithm>

#include "core/error.h"
#include "data/sampler.h"

namespace mt {

double evaluate_loss(Llama& model, const TokenFile& file, int64_t seq_len, int64_t max_windows,
                     int64_t microbatch) {
  return evaluate_loss([&](const int32_t* inputs, const int32_t* targets, int64_t B,
                           int64_t T) { return model.forward(inputs, targets, B, T); },
                       file, seq_len, max_windows, microbatch);
}

double evaluate_loss(const LossForward& forward, const TokenFile& file, int64_t seq_len, int64_t max_windows,
                     int64_t microbatch) {
  const EvalWindows windows(file, seq_len);
  const int64_t n = max_windows > 0 ? std::min(max_windows, windows.count()) : windows.count();
  std::vector<int32_t> inputs(static_cast<size_t>(microbatch * seq_len)), targets(inputs.size());
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t w = 0; w < n; w += microbatch) {
    const int64_t k = std::min(microbatch, n - w);
    windows.windows(w, k, inputs.data(), targets.data());
    sum += forward(inputs.data(), targets.data(), k, seq_len);
    count += k * seq_len;
  }
  return sum / static_cast<double>(count);
}

}  // namespace mt
