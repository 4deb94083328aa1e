#include "train/model_io.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_meta.h"
#include "ckpt/checkpoint_read.h"
#include "core/atomic_dir.h"
#include "core/device_mirror.h"
#include "core/error.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "mesh/layout.h"
#include "mesh/mesh.h"
#include "model/params.h"

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
  h.rope_scaling = format_rope_scaling(c.rope());
  h.rms_norm_eps = c.norm_eps;
  h.tie_word_embeddings = c.tie_embeddings;
  h.attention_dropout = c.attention_dropout;
  h.hidden_dropout = c.hidden_dropout;
  if (c.moe()) {
    h.num_local_experts = c.n_experts;
    h.num_experts_per_tok = c.top_k;
    h.moe_every = c.moe_every;
    h.expert_intermediate_size = c.expert_hidden();
    if (c.moe_every == 1) h.intermediate_size = c.expert_hidden();  // a Mixtral has no dense MLP
    h.router_aux_loss_coef = c.router_aux_loss_coef;
    h.router_z_loss_coef = c.router_z_loss_coef;
    h.capacity_factor = c.capacity_factor;
  }
  return h;
}
}  // namespace

namespace {
MeshCoords tp_coords(int rank) {
  MeshCoords c{};
  c[static_cast<size_t>(axis_index(Axis::tp))] = rank;
  return c;
}
}  // namespace

void save_model_dir(const std::string& dir, Llama& model, bool write) {
  MT_CHECK(model.tp_group() == nullptr, "a tensor-parallel model is saved with its mesh");
  save_model_dir(dir, std::vector<Llama*>{&model}, nullptr, write);
}

void save_model_dir(const std::string& dir, const std::vector<Llama*>& chunks, const DeviceMesh* mesh,
                    bool write) {
  const ModelConfig& cfg = chunks.front()->config();
  const ParamTable global = make_param_table(cfg);
  const MeshSizes sizes = mesh != nullptr ? mesh->sizes() : MeshSizes{};
  const MeshCoords coords = mesh != nullptr ? mesh->coords() : MeshCoords{};
  // Every rank writes the pieces it is the first holder of, where their layout
  // puts them in the full tensors, zeros elsewhere; one sum over the world then
  // gives every tensor exactly (each element has one writer).
  std::vector<float> full(static_cast<size_t>(global.total), 0.0f);
  for (Llama* model : chunks) {
    for (const ParamSpec& s : model->param_table().specs) {
      if (s.tied_copy || !first_holder(s.state_layout, coords))
        continue;  // the first stage's embedding is saved
      int64_t n = 0;
      const float* piece = model->store().local_param_of(s.name, &n);
      MT_CHECK(n == local_numel(s.state_layout, sizes), "the store's piece of ", s.name, " has ", n,
               " elements, its layout ", s.state_layout.to_string(), " another count");
      const HostView<float> host(piece, n, "checkpoint");
      copy_to_full(s.state_layout, sizes, coords, host.data(), full.data() + global.find(s.name).offset);
    }
  }
  if (mesh != nullptr && mesh->world_size() > 1) {
    Group world = mesh->world();
    world.all_reduce(full.data(), global.total, "save: assemble by layout");
  }
  if (write) write_model_dir(dir, cfg, full.data());
}

void write_model_dir(const std::string& dir, const ModelConfig& cfg, const float* full) {
  // The directory is replaced as a whole, never file by file: a failure half
  // way (disk full, a kill) leaves the previous model loadable.
  AtomicDir out(dir);
  write_hf_config((fs::path(out.staging()) / "config.json").string(), to_hf(cfg));
  std::vector<TensorRef> tensors;
  for (const auto& s : make_param_table(cfg).specs)
    tensors.push_back({s.name, s.shape, full + s.offset});
  write_safetensors((fs::path(out.staging()) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  out.commit();
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
  c.rope_scaling = h.rope_scaling;
  c.norm_eps = h.rms_norm_eps;
  c.tie_embeddings = h.tie_word_embeddings;
  c.attention_dropout = h.attention_dropout;
  c.hidden_dropout = h.hidden_dropout;
  if (h.num_local_experts > 0) {
    c.n_experts = h.num_local_experts;
    c.top_k = h.num_experts_per_tok;
    c.moe_every = h.moe_every;
    c.expert_ffn_hidden = h.expert_intermediate_size;
    c.router_aux_loss_coef = h.router_aux_loss_coef;
    c.router_z_loss_coef = h.router_z_loss_coef;
    c.capacity_factor = h.capacity_factor;
  }
  return c;
}

namespace {
// train.init_allow as a list; ConfigError for a name that is not allowable.
std::vector<std::string> parse_init_allow(const std::string& allow) {
  static const std::vector<std::string> allowable = {"rope_theta", "norm_eps", "max_seq_len", "rope_scaling"};
  std::vector<std::string> out;
  std::string item;
  for (size_t i = 0; i <= allow.size(); ++i) {
    if (i < allow.size() && allow[i] != ',') {
      if (allow[i] != ' ') item += allow[i];
      continue;
    }
    if (item.empty()) continue;
    MT_REQUIRE(
        std::find(allowable.begin(), allowable.end(), item) != allowable.end(), ConfigError,
        "train.init_allow names '", item,
        "'; only fields that shape no tensor may differ: rope_theta, norm_eps, max_seq_len, rope_scaling");
    out.push_back(item);
    item.clear();
  }
  return out;
}
}  // namespace

std::vector<std::string> check_init_from(const std::string& dir, const ModelConfig& run,
                                         const std::string& allow) {
  const std::vector<std::string> allowed = parse_init_allow(allow);
  // A checkpoint directory (weights only): its metadata.json's model keys,
  // and its files' checksums, as --resume checks them.
  const bool checkpoint = is_checkpoint_dir(dir);
  HfLlamaConfig saved;
  if (checkpoint) {
    const nlohmann::json meta = read_metadata(dir);
    verify_checkpoint(dir);
    saved = to_hf(checkpoint_model_config(meta, dir));
  } else {
    saved = read_hf_config((fs::path(dir) / "config.json").string());
  }
  const char* source = checkpoint ? "/metadata.json" : "/config.json";
  const HfLlamaConfig mine = to_hf(run);
  std::vector<std::string> notices;
  auto same = [&](const char* key, const auto& there, const auto& here) {
    if (there == here) return;
    std::ostringstream values;
    values.precision(17);
    values << "model." << key << " is " << there << " in " << dir << source << " but " << here
           << " in this run's configuration";
    const bool ok = std::find(allowed.begin(), allowed.end(), key) != allowed.end();
    MT_REQUIRE(
        ok, ConfigError, "--init-from ", dir, ": ", values.str(),
        ok ? "" : " (list the field in train.init_allow to use the run's value, if it shapes no tensor)");
    notices.push_back("--init-from: " + values.str() + "; using this run's value (train.init_allow)");
  };
  same("n_experts", saved.num_local_experts, mine.num_local_experts);
  if (saved.num_local_experts > 0 && mine.num_local_experts > 0) {
    same("top_k", saved.num_experts_per_tok, mine.num_experts_per_tok);
    same("moe_every", saved.moe_every, mine.moe_every);
    same("expert_ffn_hidden", saved.expert_intermediate_size, mine.expert_intermediate_size);
  }
  same("vocab_size", saved.vocab_size, mine.vocab_size);
  same("d_model", saved.hidden_size, mine.hidden_size);
  same("ffn_hidden", saved.intermediate_size, mine.intermediate_size);
  same("n_layers", saved.num_hidden_layers, mine.num_hidden_layers);
  same("n_heads", saved.num_attention_heads, mine.num_attention_heads);
  same("n_kv_heads", saved.num_key_value_heads, mine.num_key_value_heads);
  same("tie_embeddings", saved.tie_word_embeddings, mine.tie_word_embeddings);
  same("rope_theta", saved.rope_theta, mine.rope_theta);
  same("norm_eps", saved.rms_norm_eps, mine.rms_norm_eps);
  same("max_seq_len", saved.max_position_embeddings, mine.max_position_embeddings);
  same("rope_scaling", saved.rope_scaling, mine.rope_scaling);
  // The sizes are the run's (checked): the weights must be what that config.json describes.
  if (!checkpoint) check_model_tensors(dir, read_model_config(dir));
  return notices;
}

namespace {

// "a, b, c and 4 more"
std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 3; ++i)
    out += (i ? ", " : "") + names[i];
  if (names.size() > 3) out += " and " + std::to_string(names.size() - 3) + " more";
  return out;
}

// transformers 5 writes a Mixtral's experts fused: model.layers.N.mlp.gate.weight
// (the router), mlp.experts.gate_up_proj [E, 2I, C] (rows [0, I) w1, [I, 2I)
// w3) and mlp.experts.down_proj [E, C, I]. The name a parameter is stored
// under in that layout ("" for a parameter that has no other name).
std::string fused_name(const std::string& name) {
  const size_t moe = name.find("block_sparse_moe.");
  if (moe == std::string::npos) return "";
  const std::string layer = name.substr(0, moe), rest = name.substr(moe + 17);
  if (rest == "gate.weight") return layer + "mlp.gate.weight";
  const bool down = rest.find(".w2.") != std::string::npos;  // rest = "experts.<e>.w<1|2|3>.weight"
  return layer + (down ? "mlp.experts.down_proj" : "mlp.experts.gate_up_proj");
}

// Reads the tensor of `s` into full (its global size) from our name, or else
// from the fused layout; false if neither.
class TensorSource {
 public:
  explicit TensorSource(const SafetensorsFile& f) : f_(f) {}

  bool read(const ParamSpec& s, std::vector<float>& full) {
    if (f_.has(s.name)) {
      MT_REQUIRE(f_.shape(s.name) == s.global_shape, DataError, f_.path(), ": tensor '", s.name,
                 "' has the wrong shape");
      f_.read_f32(s.name, full.data(), static_cast<int64_t>(full.size()));
      return true;
    }
    const std::string name = fused_name(s.name);
    if (name.empty()) return false;
    const std::string rest = s.name.substr(s.name.find("block_sparse_moe.") + 17);
    if (rest == "gate.weight") return read_whole(name, s, full);
    // rest = "experts.<e>.w<1|2|3>.weight"
    const size_t dot = rest.find('.', 8);
    const int64_t e = std::stoll(rest.substr(8, dot - 8));
    const std::string w = rest.substr(dot + 1, 2);
    const bool down = w == "w2";
    if (!f_.has(name)) return false;
    const std::vector<int64_t>& shape = f_.shape(name);
    const int64_t rows = s.global_shape[0], cols = s.global_shape[1];
    const std::vector<int64_t> want = {shape.empty() ? 0 : shape[0], down ? rows : 2 * rows, cols};
    require_shape(shape.size() == 3 && shape == want && e < shape[0], name, s);
    if (name != cached_) {
      cache_.resize(static_cast<size_t>(shape[0] * shape[1] * shape[2]));
      f_.read_f32(name, cache_.data(), static_cast<int64_t>(cache_.size()));
      cached_ = name;
    }
    const int64_t first = e * shape[1] * cols + (w == "w3" ? rows * cols : 0);
    std::copy(cache_.begin() + first, cache_.begin() + first + rows * cols, full.begin());
    return true;
  }

 private:
  void require_shape(bool ok, const std::string& name, const ParamSpec& s) const {
    MT_REQUIRE(ok, DataError, f_.path(), ": tensor '", name, "' has the wrong shape for ", s.name);
  }
  bool read_whole(const std::string& name, const ParamSpec& s, std::vector<float>& full) {
    if (!f_.has(name)) return false;
    require_shape(f_.shape(name) == s.global_shape, name, s);
    f_.read_f32(name, full.data(), static_cast<int64_t>(full.size()));
    return true;
  }

  const SafetensorsFile& f_;
  std::string cached_;
  std::vector<float> cache_;
};

}  // namespace

void check_model_tensors(const std::string& dir, const ModelConfig& cfg) {
  const SafetensorsFile f = SafetensorsFile::open((fs::path(dir) / "model.safetensors").string());
  std::set<std::string> accounted;
  std::vector<std::string> missing, extra;
  for (const ParamSpec& s : make_param_table(cfg).specs) {
    const std::string fused = fused_name(s.name);
    if (f.has(s.name))
      accounted.insert(s.name);
    else if (!fused.empty() && f.has(fused))
      accounted.insert(fused);
    else
      missing.push_back(s.name);
  }
  for (const std::string& name : f.names())
    if (accounted.count(name) == 0) extra.push_back(name);
  const std::string model = " (config.json: " + std::to_string(cfg.n_layers) +
                            " layers, tie_word_embeddings " + (cfg.tie_embeddings ? "true" : "false") + ", " +
                            std::to_string(cfg.n_experts) + " experts)";
  MT_REQUIRE(missing.empty(), DataError, f.path(), ": lacks ", missing.size(),
             " tensor(s) its config.json's model needs: ", name_list(missing), model);
  MT_REQUIRE(extra.empty(), DataError, f.path(), ": holds ", extra.size(),
             " tensor(s) its config.json's model does not account for: ", name_list(extra), model,
             "; a config.json that disagrees with its weights is refused rather than loaded in part");
}

void load_model_dir(const std::string& dir, Llama& model) {
  // The configuration was checked against the run's at start-up (check_init_from);
  // the file's tensors against the model's config, and each tensor's shape, here.
  check_model_tensors(dir, model.config());
  const SafetensorsFile f = SafetensorsFile::open((fs::path(dir) / "model.safetensors").string());
  std::vector<float> local(static_cast<size_t>(model.num_params())), full;
  const MeshSizes sizes{.tp = model.tp_rank().size};
  TensorSource source(f);
  for (const auto& s : model.param_table().specs) {  // this rank's piece of each tensor, read by its layout
    int64_t numel = 1;
    for (int64_t d : s.global_shape)
      numel *= d;
    full.resize(static_cast<size_t>(numel));
    MT_REQUIRE(source.read(s, full), DataError, f.path(), ": tensor '", s.name, "' is missing");
    copy_to_local(s.layout, sizes, tp_coords(model.tp_rank().rank), full.data(), local.data() + s.offset);
  }
  model.store().scatter_full_params(local.data());  // each dp rank keeps its share
}

void export_checkpoint(const std::string& dir, const std::string& out) {
  const CheckpointModel m = read_checkpoint_model(dir);
  write_model_dir(out, m.cfg, m.full.data());
}

}  // namespace mt
