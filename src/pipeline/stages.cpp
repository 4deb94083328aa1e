#include "pipeline/stages.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace mt::pp {

void check_virtual_stages(int pp, int v) {
  MT_REQUIRE(v == 1 || pp > 1, ConfigError, "parallel.virtual_stages (", v,
             ") > 1 needs pipeline parallelism: parallel.pp (", pp, ") must be greater than 1");
}

std::vector<int64_t> stage_layer_counts(int64_t n_layers, int pp, int v, const std::string& explicit_layers) {
  check_virtual_stages(pp, v);
  const int64_t K = static_cast<int64_t>(pp) * v;
  std::vector<int64_t> counts;
  if (explicit_layers.empty()) {
    MT_REQUIRE(n_layers >= K, ConfigError, "model.n_layers (", n_layers, ") must be at least parallel.pp (",
               pp, ") x parallel.virtual_stages (", v, ") = ", K, ": every virtual stage needs a layer");
    for (int64_t k = 0; k < K; ++k)
      counts.push_back(n_layers / K + (k < n_layers % K ? 1 : 0));
  } else {
    // Every comma separates two entries: an empty one (a leading, trailing or
    // doubled comma) is refused like any other non-count. A count above
    // n_layers cannot sum to it, and refusing it here keeps the sum below from
    // overflowing.
    for (size_t at = 0;;) {
      const size_t comma = explicit_layers.find(',', at);
      const std::string item = explicit_layers.substr(at, comma == std::string::npos ? comma : comma - at);
      errno = 0;
      char* end = nullptr;
      const long long n = std::strtoll(item.c_str(), &end, 10);
      MT_REQUIRE(end != item.c_str() && *end == '\0' && errno == 0 && n >= 1 && n <= n_layers, ConfigError,
                 "parallel.stage_layers ('", explicit_layers, "'): '", item,
                 "' is not a layer count between 1 and model.n_layers (", n_layers, ")");
      counts.push_back(n);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    MT_REQUIRE(static_cast<int64_t>(counts.size()) == K, ConfigError, "parallel.stage_layers ('",
               explicit_layers, "') has ", counts.size(), " entries but parallel.pp (", pp,
               ") x parallel.virtual_stages (", v, ") = ", K, " virtual stages");
    int64_t sum = 0;
    for (int64_t n : counts)
      sum += n;
    MT_REQUIRE(sum == n_layers, ConfigError, "parallel.stage_layers ('", explicit_layers, "') sums to ", sum,
               " layers but model.n_layers is ", n_layers);
  }
  return counts;
}

}  // namespace mt::pp
