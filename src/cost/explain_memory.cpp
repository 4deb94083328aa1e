#include "cost/explain_memory.h"

#include <vector>

#include "cost/memory_model.h"

namespace mt {

std::string explain_memory(Group* world, const Config& cfg, const MemStats& mine) {
  const size_t K = kNumMemKinds, W = static_cast<size_t>(world != nullptr ? world->size() : 1);
  std::vector<int64_t> all(K * W);
  if (world != nullptr && W > 1)
    world->all_gather(mine.peak.data(), all.data(), static_cast<int64_t>(K), ElemType::i64, "memory model");
  else
    std::copy(mine.peak.begin(), mine.peak.end(), all.begin());
  if (world != nullptr && world->rank() != 0) return "";
  std::vector<std::array<int64_t, kNumMemKinds>> measured(W);
  for (size_t r = 0; r < W; ++r)
    std::copy(all.begin() + static_cast<std::ptrdiff_t>(r * K),
              all.begin() + static_cast<std::ptrdiff_t>((r + 1) * K), measured[r].begin());
  bool within = false;
  std::string out = memory_model_table(estimate_all_ranks(cfg), measured, &within);
  size_t outside = 0;
  for (size_t at = out.find("OUTSIDE"); at != std::string::npos; at = out.find("OUTSIDE", at + 1))
    ++outside;
  const size_t rows = K * W;
  out += within ? "memory model: all " + std::to_string(rows) + " rows within their bounds\n"
                : "memory model: " + std::to_string(outside) + " of " + std::to_string(rows) +
                      " rows OUTSIDE their bounds\n";
  return out;
}

}  // namespace mt
