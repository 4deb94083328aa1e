#include "formats/hf_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "ops/rope_scaling.h"

namespace mt {
namespace {

using Json = nlohmann::ordered_json;

// Reads keys of one config.json, reporting the file and key on failure.
class Reader {
 public:
  Reader(const Json& root, const std::string& path) : root_(root), path_(path) {}

  // Absent and null both mean "use the default" (transformers passes None on).
  bool present(const char* key) const { return root_.contains(key) && !root_[key].is_null(); }

  int64_t integer(const char* key) const {
    const Json& v = get(key);
    if (!v.is_number_integer()) fail(key, "must be an integer, got ", v.dump());
    return v.get<int64_t>();
  }
  double number(const char* key) const {
    const Json& v = get(key);
    if (!v.is_number()) fail(key, "must be a number, got ", v.dump());
    return v.get<double>();
  }
  bool boolean(const char* key) const {
    const Json& v = get(key);
    if (!v.is_boolean()) fail(key, "must be true or false, got ", v.dump());
    return v.get<bool>();
  }
  std::string string(const char* key) const {
    const Json& v = get(key);
    if (!v.is_string()) fail(key, "must be a string, got ", v.dump());
    return v.get<std::string>();
  }

  template <typename... Args>
  [[noreturn]] void fail(const char* key, Args&&... args) const {
    MT_THROW(ConfigError, "config '", path_, "': key '", key, "' ", std::forward<Args>(args)...);
  }

 private:
  const Json& get(const char* key) const {
    if (!present(key)) fail(key, "is required but missing");
    return root_[key];
  }

  const Json& root_;
  const std::string& path_;
};

// One RoPE scaling object (rope_scaling, or rope_parameters) in our spelling.
std::string rope_spec(const Json& obj, const char* key, const std::string& path) {
  const std::string where = "config '" + path + "': key '" + key + "'";
  MT_REQUIRE(obj.is_object(), ConfigError, where, " must be an object, got ", obj.dump());
  const Reader r(obj, path);
  const char* type_key = r.present("rope_type") ? "rope_type" : "type";
  MT_REQUIRE(r.present(type_key), ConfigError, where, " needs 'rope_type' (", obj.dump(), ")");
  RopeScaling s;
  s.type = rope_type_from_name(r.string(type_key), where);
  if (s.type == RopeType::none) return "none";
  for (const auto& [name, value] : obj.items()) {
    if (name == "rope_type" || name == "type" || name == "rope_theta" || value.is_null()) continue;
    MT_REQUIRE(value.is_number(), ConfigError, where, ": field '", name, "' must be a number, got ",
               value.dump());
    set_rope_field(&s, name, value.get<double>(), where);
  }
  require_rope_factor(s.type, r.present("factor"), where);
  check_rope_scaling(s, where);
  return format_rope_scaling(s);
}

// RoPE in either spelling (see read_hf_config in hf_config.h) into c.
void read_rope(const Json& root, const Reader& r, const std::string& path, HfLlamaConfig* c) {
  c->rope_theta = r.present("rope_theta") ? r.number("rope_theta") : 10000.0;
  if (r.present("rope_scaling")) c->rope_scaling = rope_spec(root["rope_scaling"], "rope_scaling", path);
  if (!r.present("rope_parameters")) return;
  const Json& p = root["rope_parameters"];
  if (!p.is_object()) r.fail("rope_parameters", "must be an object, got ", p.dump());
  const Reader nested(p, path);
  if (nested.present("rope_theta")) {
    const double theta = nested.number("rope_theta");
    if (r.present("rope_theta") && theta != c->rope_theta) {
      r.fail("rope_parameters", "holds rope_theta ", theta, " but the top-level rope_theta is ",
             c->rope_theta);
    }
    c->rope_theta = theta;
  }
  if (!nested.present("rope_type") && !nested.present("type")) return;
  const std::string spec = rope_spec(p, "rope_parameters", path);
  if (r.present("rope_scaling") && spec != c->rope_scaling)
    r.fail("rope_parameters", "holds the scaling ", spec, " but rope_scaling holds ", c->rope_scaling);
  c->rope_scaling = spec;
}

Json rope_json(const std::string& spec) {
  const RopeScaling s = parse_rope_scaling(spec);
  Json j = {{"rope_type", rope_type_name(s.type)}};
  for (const auto& [key, value] : rope_fields(s)) {
    if (key == "original_max_position_embeddings")
      j[key] = static_cast<int64_t>(value);
    else
      j[key] = value;
  }
  return j;
}

// Mixtral's fields (or meshtrain_moe's: with dense layers between, not a Mixtral).
void write_moe_fields(Json& j, const HfLlamaConfig& c) {
  const bool mixtral = c.moe_every == 1;
  j["architectures"] = {mixtral ? "MixtralForCausalLM" : "MeshtrainMoeForCausalLM"};
  j["model_type"] = mixtral ? "mixtral" : "meshtrain_moe";
  if (mixtral) {
    j["intermediate_size"] = c.expert_intermediate_size;  // Mixtral has no dense MLP
  } else {
    j["expert_intermediate_size"] = c.expert_intermediate_size;
    j["moe_every"] = c.moe_every;
    j["note"] =
        "not a Mixtral: only layers l with (l + 1) % moe_every == 0 are mixtures of experts, the others "
        "dense Llama MLPs of intermediate_size (meshtrain docs/FORMATS.md)";
  }
  j["num_local_experts"] = c.num_local_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["router_aux_loss_coef"] = c.router_aux_loss_coef;
  j["output_router_logits"] = c.router_aux_loss_coef > 0;
  j["router_jitter_noise"] = 0.0;
  j["sliding_window"] = nullptr;
  j["router_z_loss_coef"] = c.router_z_loss_coef;
  j["capacity_factor"] = c.capacity_factor;
}

// The expert fields of a "mixtral" or "meshtrain_moe" config.json into c.
void read_moe_fields(const Reader& r, bool mixtral, HfLlamaConfig* c) {
  c->num_local_experts = r.integer("num_local_experts");
  c->num_experts_per_tok = r.integer("num_experts_per_tok");
  c->moe_every = mixtral ? 1 : r.integer("moe_every");
  c->expert_intermediate_size = mixtral ? c->intermediate_size : r.integer("expert_intermediate_size");
  c->router_aux_loss_coef = r.present("router_aux_loss_coef") ? r.number("router_aux_loss_coef") : 0.001;
  c->router_z_loss_coef = r.present("router_z_loss_coef") ? r.number("router_z_loss_coef") : 0.0;
  c->capacity_factor = r.present("capacity_factor") ? r.number("capacity_factor") : 0.0;
  if (r.present("router_jitter_noise") && r.number("router_jitter_noise") != 0)
    r.fail("router_jitter_noise", "is ", r.number("router_jitter_noise"), "; only 0 is supported");
  if (r.present("sliding_window"))
    r.fail("sliding_window", "is set; sliding-window attention is not supported");
  if (c->num_local_experts < 1 || c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->num_local_experts)
    r.fail("num_experts_per_tok", "(", c->num_experts_per_tok, ") must be between 1 and num_local_experts (",
           c->num_local_experts, ")");
}

}  // namespace

void check_hf_config(const HfLlamaConfig& c, const std::string& source) {
  const std::pair<const char*, int64_t> sizes[] = {{"vocab_size", c.vocab_size},
                                                   {"hidden_size", c.hidden_size},
                                                   {"intermediate_size", c.intermediate_size},
                                                   {"num_hidden_layers", c.num_hidden_layers},
                                                   {"num_attention_heads", c.num_attention_heads},
                                                   {"num_key_value_heads", c.num_key_value_heads},
                                                   {"max_position_embeddings", c.max_position_embeddings}};
  for (const auto& [key, v] : sizes) {
    MT_REQUIRE(v > 0, ConfigError, "config '", source, "': ", key, " (", v, ") must be positive");
  }
  MT_REQUIRE(c.rope_theta > 0, ConfigError, "config '", source, "': rope_theta (", c.rope_theta,
             ") must be positive");
  MT_REQUIRE(c.rms_norm_eps > 0, ConfigError, "config '", source, "': rms_norm_eps (", c.rms_norm_eps,
             ") must be positive");
  MT_REQUIRE(c.hidden_size % c.num_attention_heads == 0, ConfigError, "config '", source, "': hidden_size (",
             c.hidden_size, ") must be divisible by num_attention_heads (", c.num_attention_heads, ")");
  MT_REQUIRE(c.num_attention_heads % c.num_key_value_heads == 0, ConfigError, "config '", source,
             "': num_attention_heads (", c.num_attention_heads,
             ") must be divisible by num_key_value_heads (", c.num_key_value_heads, ")");
}

void write_hf_config(const std::string& path, const HfLlamaConfig& c) {
  check_hf_config(c, path);
  Json j = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden_size},
            {"intermediate_size", c.intermediate_size},
            {"num_hidden_layers", c.num_hidden_layers},
            {"num_attention_heads", c.num_attention_heads},
            {"num_key_value_heads", c.num_key_value_heads},
            {"max_position_embeddings", c.max_position_embeddings},
            {"rope_theta", c.rope_theta},
            {"rms_norm_eps", c.rms_norm_eps},
            {"tie_word_embeddings", c.tie_word_embeddings},
            {"attention_dropout", c.attention_dropout},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"torch_dtype", "float32"}};
  if (c.hidden_dropout > 0) j["hidden_dropout"] = c.hidden_dropout;
  if (c.num_local_experts > 0) write_moe_fields(j, c);
  if (c.rope_scaling != "none") j["rope_scaling"] = rope_json(c.rope_scaling);  // absent: no scaling
  write_file_atomic(path, j.dump(2) + "\n");
}

HfLlamaConfig read_hf_config(const std::string& path) {
  const std::string text = read_file(path, kMaxConfigFile, "config.json");
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::exception& e) {
    MT_THROW(ConfigError, "config '", path, "' is not valid JSON: ", e.what());
  }
  MT_REQUIRE(root.is_object(), ConfigError, "config '", path, "' must be a JSON object, got ",
             root.type_name());
  const Reader r(root, path);

  // Features that change the computation but that our model does not have:
  // refuse them rather than load a model that silently computes something else.
  const std::string type = r.present("model_type") ? r.string("model_type") : "llama";
  if (type != "llama" && type != "mixtral" && type != "meshtrain_moe") {
    r.fail("model_type", "is '", type, "'; only 'llama', 'mixtral' and 'meshtrain_moe' are supported");
  }
  if (r.present("hidden_act") && r.string("hidden_act") != "silu") {
    r.fail("hidden_act", "is '", r.string("hidden_act"), "'; only 'silu' is supported");
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (r.present(key) && r.boolean(key)) r.fail(key, "is true; biases are not supported");
  }
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts"}) {
    if (type == "llama" && r.present(key) &&
        !(root[key].is_number_integer() && root[key].get<int64_t>() <= 1))
      r.fail(key, "is ", root[key].dump(), "; a mixture of experts needs model_type 'mixtral'");
  }

  HfLlamaConfig c;
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_hidden_layers = r.integer("num_hidden_layers");
  c.num_attention_heads = r.integer("num_attention_heads");
  c.num_key_value_heads =
      r.present("num_key_value_heads") ? r.integer("num_key_value_heads") : c.num_attention_heads;
  c.max_position_embeddings = r.integer("max_position_embeddings");
  c.rms_norm_eps = r.number("rms_norm_eps");
  read_rope(root, r, path, &c);
  c.tie_word_embeddings = r.present("tie_word_embeddings") ? r.boolean("tie_word_embeddings") : false;
  c.attention_dropout = r.present("attention_dropout") ? r.number("attention_dropout") : 0.0;
  c.hidden_dropout = r.present("hidden_dropout") ? r.number("hidden_dropout") : 0.0;
  if (type != "llama") read_moe_fields(r, type == "mixtral", &c);
  check_hf_config(c, path);
  if (r.present("head_dim") && r.integer("head_dim") != c.hidden_size / c.num_attention_heads) {
    r.fail("head_dim", "(", r.integer("head_dim"), ") must equal hidden_size / num_attention_heads (",
           c.hidden_size / c.num_attention_heads, ")");
  }
  return c;
}

}  // namespace mt
