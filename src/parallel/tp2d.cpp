#include "parallel/tp2d.h"

#include <charconv>
#include <string>

#include "core/error.h"

namespace mt::tp2d {

namespace {

// A positive decimal integer filling `s` exactly, or -1.
int64_t positive_int(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v <= 0) return -1;
  return v;
}

}  // namespace

Grid parse(std::string_view spec, int64_t tp) {
  if (spec.empty()) return {1, tp};
  const size_t comma = spec.find(',');
  const int64_t R = comma == std::string_view::npos ? -1 : positive_int(spec.substr(0, comma));
  const int64_t C = comma == std::string_view::npos ? -1 : positive_int(spec.substr(comma + 1));
  MT_REQUIRE(R > 0 && C > 0, ConfigError, "parallel.tp2d ('", std::string(spec),
             "') must be \"R,C\": two positive integers, the grid's rows and columns, with R x C = "
             "parallel.tp");
  MT_REQUIRE(R * C == tp, ConfigError, "parallel.tp2d ('", std::string(spec), "'): R x C (", R, " x ", C,
             " = ", R * C, ") must equal parallel.tp (", tp, ")");
  return {R, C};
}

void check(const Grid& g, const Companions& w) {
  if (!g.two_d()) return;  // 1 x C: 1-D tp over C ranks, with 1-D tp's rules
  const int64_t tp = g.rows * g.cols;
  auto refuse = [&](bool bad, const char* what) {
    MT_REQUIRE(!bad, ConfigError, "parallel.tp2d (\"", g.rows, ",", g.cols, "\") with ", what,
               ": 2-D tensor parallelism is not built with it (docs/PARALLELISM.md \"2-D tensor "
               "parallelism\")");
  };
  refuse(w.sp, "parallel.sp = true");
  refuse(w.cp > 1, "parallel.cp > 1");
  refuse(w.moe, "a mixture of experts (model.n_experts > 0)");
  refuse(w.dropout, "dropout (model.attention_dropout or model.hidden_dropout > 0)");
  refuse(w.tp_overlap, "parallel.tp_overlap = true");
  auto divides = [&](const char* key, int64_t n, const char* why) {
    MT_REQUIRE(n % tp == 0, ConfigError, key, " (", n, ") must be divisible by R x C (", tp,
               ") under parallel.tp2d (\"", g.rows, ",", g.cols, "\"): ", why);
  };
  divides("model.n_heads", w.n_heads, "each rank runs its own query heads");
  divides("model.n_kv_heads", w.n_kv_heads, "kv heads are split over the grid, never replicated");
  divides("model.ffn_hidden", w.ffn_hidden, "each rank applies SwiGLU to its own hidden channels");
}

}  // namespace mt::tp2d
