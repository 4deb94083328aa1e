// RoPE scaling with Hugging Face's `rope_scaling` semantics (transformers'
// rope initialisation functions): how the inverse frequencies and the
// attention factor of rotary embeddings change to serve sequences longer than
// the training length. docs/MODEL.md ("RoPE scaling") gives the formulas.
//
//   linear   inv_freq / factor (positions p → p / factor)
//   dynamic  NTK-aware: base' = base·((factor·L / L0) − (factor − 1))^(D/(D−2))
//            once the sequence length L exceeds L0; unchanged below
//   yarn     per pair, a ramp between interpolation (inv_freq / factor) for
//            slow pairs and extrapolation (inv_freq) for fast ones, chosen by
//            beta_fast / beta_slow rotations within L0; cos and sin are both
//            multiplied by attention_factor (default 0.1·ln(factor) + 1)
//   llama3   pairs with wavelength > L0 / low_freq_factor divided by factor,
//            < L0 / high_freq_factor unchanged, a smooth blend between
//
// L0 is original_max_position_embeddings, or the model's max_seq_len when the
// type allows it to be absent (dynamic, yarn).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

enum class RopeType { none, linear, dynamic, yarn, llama3 };

struct RopeScaling {
  RopeType type = RopeType::none;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;          // 0: absent (the model's max_seq_len)
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double attention_factor = 0.0;                         // yarn; 0: absent (0.1·ln(factor) + 1)
  double low_freq_factor = 0.0, high_freq_factor = 0.0;  // llama3

  bool operator==(const RopeScaling&) const = default;
};

// The type's name as Hugging Face spells it ("default" for none is accepted
// by rope_type_from_name); ConfigError naming the type and the known ones.
const char* rope_type_name(RopeType t);
RopeType rope_type_from_name(std::string_view name, std::string_view where);

// One field of a scaling, by its Hugging Face name; ConfigError naming the
// field when the type does not take it or the value breaks its rule.
void set_rope_field(RopeScaling* s, std::string_view key, double value, std::string_view where);

// Checks that every field the type needs is present and consistent
// (llama3: low_freq_factor < high_freq_factor; factor ≥ 1, ...); ConfigError
// naming `where`, the field and the rule.
void check_rope_scaling(const RopeScaling& s, std::string_view where);
// ConfigError unless a scaling of type t (not none) was given its factor.
void require_rope_factor(RopeType t, bool has_factor, std::string_view where);

// The config key's spelling (model.rope_scaling): "none", or the type followed
// by its fields, e.g. "yarn,factor=8,original_max_position_embeddings=128".
// Parse checks as check_rope_scaling does; format writes every field the type
// uses that is present, so parse(format(s)) == s.
RopeScaling parse_rope_scaling(std::string_view spec, std::string_view where = "model.rope_scaling");
std::string format_rope_scaling(const RopeScaling& s);

// The fields a type reads, in Hugging Face's names, with their values (absent
// optional fields left out): what config.json holds besides the type.
std::vector<std::pair<std::string, double>> rope_fields(const RopeScaling& s);

// Inverse frequency of each of the head_dim/2 rotary pairs, in double, for a
// sequence of `seq_len` tokens (only dynamic depends on it) of a model with
// max_seq_len positions and base theta.
std::vector<double> rope_inv_freq(const RopeScaling& s, int64_t head_dim, double theta, int64_t max_seq_len,
                                  int64_t seq_len);

// The factor multiplying both cos and sin (1 except for yarn).
double rope_attention_factor(const RopeScaling& s);

// The L0 of the header comment.
int64_t rope_original_length(const RopeScaling& s, int64_t max_seq_len);

}  // namespace mt
