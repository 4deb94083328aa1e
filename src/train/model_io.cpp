#include "train/model_io.h"

#include <filesystem>

#include "checkpoint/hf_config.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"

namespace mt {

namespace fs = std::filesystem;

namespace {
HfLlamaConfig to_hf(const ModelConfig& c) {
  HfLlamaConfig h;
  h.vocab_size = c.vocab_size;
  h.hidden_size = c.d_model;
  h.intermediate_size = c.ffn_hidden;
  h.num_hidden_layers = c.n_layers;
  h.num_attention_heads = c.n_heads;
  h.num_key_value_heads = c.n_kv_heads;
  h.max_position_embeddings = c.max_seq_len;
  h.rope_theta = c.rope_theta;
  h.rms_norm_eps = c.norm_eps;
  h.tie_word_embeddings = c.tie_embeddings;
  return h;
}
}  // namespace

void save_model_dir(const std::string& dir, Llama& model, bool write) {
  std::vector<float> full(static_cast<size_t>(model.num_params()));
  model.store().gather_full_params(full.data());  // collective for sharded stores
  if (!write) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  MT_REQUIRE(!ec, IoError, "cannot create model directory '", dir, "': ", ec.message());
  write_hf_config((fs::path(dir) / "config.json").string(), to_hf(model.config()));
  std::vector<TensorRef> tensors;
  for (const auto& s : model.param_table().specs)
    tensors.push_back({s.name, s.shape, full.data() + s.offset});
  write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

ModelConfig read_model_config(const std::string& dir) {
  const HfLlamaConfig h = read_hf_config((fs::path(dir) / "config.json").string());
  ModelConfig c;
  c.vocab_size = h.vocab_size;
  c.d_model = h.hidden_size;
  c.ffn_hidden = h.intermediate_size;
  c.n_layers = h.num_hidden_layers;
  c.n_heads = h.num_attention_heads;
  c.n_kv_heads = h.num_key_value_heads;
  c.max_seq_len = h.max_position_embeddings;
  c.rope_theta = h.rope_theta;
  c.norm_eps = h.rms_norm_eps;
  c.tie_embeddings = h.tie_word_embeddings;
  return c;
}

void load_model_dir(const std::string& dir, Llama& model) {
  const ModelConfig saved = read_model_config(dir);
  const ModelConfig& c = model.config();
  auto same = [&](const char* key, auto a, auto b) {
    MT_REQUIRE(a == b, ConfigError, "--init-from ", dir, ": model.", key, " is ", a, " there but ", b,
               " in this run's configuration");
  };
  same("vocab_size", saved.vocab_size, c.vocab_size);
  same("d_model", saved.d_model, c.d_model);
  same("ffn_hidden", saved.ffn_hidden, c.ffn_hidden);
  same("n_layers", saved.n_layers, c.n_layers);
  same("n_heads", saved.n_heads, c.n_heads);
  same("n_kv_heads", saved.n_kv_heads, c.n_kv_heads);
  same("tie_embeddings", saved.tie_embeddings, c.tie_embeddings);
  const SafetensorsFile f = SafetensorsFile::open((fs::path(dir) / "model.safetensors").string());
  std::vector<float> full(static_cast<size_t>(model.num_params()));
  for (const auto& s : model.param_table().specs) {
    MT_REQUIRE(f.has(s.name), DataError, f.path(), ": tensor '", s.name, "' is missing");
    MT_REQUIRE(f.shape(s.name) == s.shape, DataError, f.path(), ": tensor '", s.name,
               "' has the wrong shape");
    f.read_f32(s.name, full.data() + s.offset, s.numel);
  }
  model.store().scatter_full_params(full.data());  // each rank keeps its share
}

}  // namespace mt
