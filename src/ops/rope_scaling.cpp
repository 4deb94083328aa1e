#include "ops/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>

#include "core/error.h"

namespace mt {
namespace {

struct TypeName {
  RopeType type;
  const char* name;
};
constexpr TypeName kTypes[] = {{RopeType::none, "none"},
                               {RopeType::linear, "linear"},
                               {RopeType::dynamic, "dynamic"},
                               {RopeType::yarn, "yarn"},
                               {RopeType::llama3, "llama3"}};

// Which fields each type reads (Hugging Face's names); required ones first.
struct FieldUse {
  const char* key;
  bool linear, dynamic, yarn, llama3;
};
constexpr FieldUse kFields[] = {
    {"factor", true, true, true, true},
    {"original_max_position_embeddings", false, true, true, true},
    {"beta_fast", false, false, true, false},
    {"beta_slow", false, false, true, false},
    {"attention_factor", false, false, true, false},
    {"low_freq_factor", false, false, false, true},
    {"high_freq_factor", false, false, false, true},
};

bool type_uses(const FieldUse& f, RopeType t) {
  switch (t) {
    case RopeType::linear:
      return f.linear;
    case RopeType::dynamic:
      return f.dynamic;
    case RopeType::yarn:
      return f.yarn;
    case RopeType::llama3:
      return f.llama3;
    case RopeType::none:
      return false;
  }
  return false;
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// inv_freq of the unscaled rotation: θ^(−2i/D), computed as the model always has.
std::vector<double> default_inv_freq(int64_t head_dim, double theta) {
  std::vector<double> f(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i)
    f[static_cast<size_t>(i)] =
        std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  return f;
}

// YaRN's ramp: pair i interpolates fully below `low`, extrapolates above `high`.
void yarn_blend(std::vector<double>& f, const RopeScaling& s, int64_t D, double theta, int64_t L0) {
  const double two_pi = 2.0 * std::numbers::pi;
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(D) * std::log(static_cast<double>(L0) / (rotations * two_pi)) /
           (2.0 * std::log(theta));
  };
  const double low = std::max(std::floor(correction_dim(s.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(s.beta_slow)), static_cast<double>(D - 1));
  if (low == high) high += 0.001;  // as transformers does, to avoid 0/0
  for (size_t i = 0; i < f.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    f[i] = f[i] / s.factor * ramp + f[i] * (1.0 - ramp);
  }
}

void llama3_blend(std::vector<double>& f, const RopeScaling& s) {
  const double L0 = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = L0 / s.low_freq_factor, high_wavelen = L0 / s.high_freq_factor;
  for (double& x : f) {
    const double wavelen = 2.0 * std::numbers::pi / x;
    if (wavelen > low_wavelen) {
      x /= s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (L0 / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      x = (1.0 - smooth) * x / s.factor + smooth * x;
    }
  }
}

}  // namespace

const char* rope_type_name(RopeType t) {
  for (const TypeName& n : kTypes)
    if (n.type == t) return n.name;
  return "?";
}

RopeType rope_type_from_name(std::string_view name, std::string_view where) {
  if (name == "default") return RopeType::none;
  for (const TypeName& n : kTypes)
    if (name == n.name) return n.type;
  MT_THROW(ConfigError, where, ": unknown RoPE scaling type '", name,
           "'; known: none (default), linear, dynamic, yarn, llama3");
}

void set_rope_field(RopeScaling* s, std::string_view key, double value, std::string_view where) {
  const FieldUse* use = nullptr;
  for (const FieldUse& f : kFields)
    if (key == f.key) use = &f;
  MT_REQUIRE(use != nullptr && type_uses(*use, s->type), ConfigError, where, ": RoPE scaling type '",
             rope_type_name(s->type), "' has no field '", key, "'");
  MT_REQUIRE(std::isfinite(value) && value > 0, ConfigError, where, ": ", key, " (", value,
             ") must be a positive number");
  if (key == "factor") s->factor = value;
  if (key == "beta_fast") s->beta_fast = value;
  if (key == "beta_slow") s->beta_slow = value;
  if (key == "attention_factor") s->attention_factor = value;
  if (key == "low_freq_factor") s->low_freq_factor = value;
  if (key == "high_freq_factor") s->high_freq_factor = value;
  if (key == "original_max_position_embeddings") {
    MT_REQUIRE(value == std::floor(value) && value < 1e15, ConfigError, where, ": ", key, " (", value,
               ") must be a whole number");
    s->original_max_position_embeddings = static_cast<int64_t>(value);
  }
}

void require_rope_factor(RopeType t, bool has_factor, std::string_view where) {
  MT_REQUIRE(has_factor, ConfigError, where, ": RoPE scaling '", rope_type_name(t),
             "' needs the field 'factor'");
}

void check_rope_scaling(const RopeScaling& s, std::string_view where) {
  if (s.type == RopeType::none) return;
  const char* type = rope_type_name(s.type);
  MT_REQUIRE(s.factor >= 1.0, ConfigError, where, ": RoPE scaling '", type, "' needs factor ≥ 1 (got ",
             s.factor, ")");
  if (s.type != RopeType::llama3) return;
  MT_REQUIRE(s.original_max_position_embeddings > 0, ConfigError, where,
             ": RoPE scaling 'llama3' needs the field 'original_max_position_embeddings'");
  MT_REQUIRE(s.low_freq_factor > 0, ConfigError, where,
             ": RoPE scaling 'llama3' needs the field 'low_freq_factor'");
  MT_REQUIRE(s.high_freq_factor > 0, ConfigError, where,
             ": RoPE scaling 'llama3' needs the field 'high_freq_factor'");
  MT_REQUIRE(s.low_freq_factor < s.high_freq_factor, ConfigError, where, ": llama3 low_freq_factor (",
             s.low_freq_factor, ") must be below high_freq_factor (", s.high_freq_factor, ")");
}

RopeScaling parse_rope_scaling(std::string_view spec, std::string_view where) {
  RopeScaling s;
  const size_t comma = spec.find(',');
  s.type = rope_type_from_name(spec.substr(0, comma), where);
  bool has_factor = false;
  for (size_t at = comma; at != std::string_view::npos;) {
    const size_t next = spec.find(',', at + 1);
    const std::string_view item = spec.substr(at + 1, next == std::string_view::npos ? next : next - at - 1);
    const size_t eq = item.find('=');
    MT_REQUIRE(eq != std::string_view::npos, ConfigError, where, ": '", item,
               "' must be field=value (e.g. \"linear,factor=4\")");
    const std::string value(item.substr(eq + 1));
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    MT_REQUIRE(!value.empty() && end == value.c_str() + value.size(), ConfigError, where, ": the value of '",
               item.substr(0, eq), "' ('", value, "') is not a number");
    set_rope_field(&s, item.substr(0, eq), v, where);
    has_factor = has_factor || item.substr(0, eq) == "factor";
    at = next;
  }
  if (s.type != RopeType::none) require_rope_factor(s.type, has_factor, where);
  check_rope_scaling(s, where);
  return s;
}

std::vector<std::pair<std::string, double>> rope_fields(const RopeScaling& s) {
  std::vector<std::pair<std::string, double>> out;
  if (s.type == RopeType::none) return out;
  out.emplace_back("factor", s.factor);
  if (s.original_max_position_embeddings > 0)
    out.emplace_back("original_max_position_embeddings",
                     static_cast<double>(s.original_max_position_embeddings));
  if (s.type == RopeType::yarn) {
    out.emplace_back("beta_fast", s.beta_fast);
    out.emplace_back("beta_slow", s.beta_slow);
    if (s.attention_factor > 0) out.emplace_back("attention_factor", s.attention_factor);
  }
  if (s.type == RopeType::llama3) {
    out.emplace_back("low_freq_factor", s.low_freq_factor);
    out.emplace_back("high_freq_factor", s.high_freq_factor);
  }
  return out;
}

std::string format_rope_scaling(const RopeScaling& s) {
  std::string out = rope_type_name(s.type);
  for (const auto& [key, value] : rope_fields(s))
    out += "," + key + "=" + number(value);
  return out;
}

int64_t rope_original_length(const RopeScaling& s, int64_t max_seq_len) {
  return s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings : max_seq_len;
}

std::vector<double> rope_inv_freq(const RopeScaling& s, int64_t head_dim, double theta, int64_t max_seq_len,
                                  int64_t seq_len) {
  const int64_t L0 = rope_original_length(s, max_seq_len);
  switch (s.type) {
    case RopeType::none:
      return default_inv_freq(head_dim, theta);
    case RopeType::linear: {
      std::vector<double> f = default_inv_freq(head_dim, theta);
      for (double& x : f)
        x /= s.factor;
      return f;
    }
    case RopeType::dynamic: {
      if (seq_len <= L0) return default_inv_freq(head_dim, theta);
      const double D = static_cast<double>(head_dim);
      const double ratio =
          s.factor * static_cast<double>(seq_len) / static_cast<double>(L0) - (s.factor - 1.0);
      return default_inv_freq(head_dim, theta * std::pow(ratio, D / (D - 2.0)));
    }
    case RopeType::yarn: {
      std::vector<double> f = default_inv_freq(head_dim, theta);
      yarn_blend(f, s, head_dim, theta, L0);
      return f;
    }
    case RopeType::llama3: {
      std::vector<double> f = default_inv_freq(head_dim, theta);
      llama3_blend(f, s);
      return f;
    }
  }
  return {};
}

double rope_attention_factor(const RopeScaling& s) {
  if (s.type != RopeType::yarn) return 1.0;
  if (s.attention_factor > 0) return s.attention_factor;
  return s.factor <= 1.0 ? 1.0 : 0.1 * std::log(s.factor) + 1.0;
}

}  // namespace mt
