// metadata.json, and the start-up side of resuming: which checkpoint, and
// whether this run can take it (ckpt/checkpoint.h).
#include "ckpt/checkpoint_meta.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "core/atomic_dir.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file.h"
#include "model/params.h"

namespace mt {

namespace fs = std::filesystem;
using nlohmann::json;

std::string checkpoint_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

int64_t checkpoint_step(const std::string& name) {
  if (name.size() != 13 || name.rfind("step-", 0) != 0) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::vector<std::string> checkpoint_states(const TrainModel& model) {
  std::vector<std::string> states = {""};
  const Optimizer& o = *model.optims.front();
  for (int k = 0; k < o.state_count(); ++k)
    states.push_back(o.state_suffix(k));
  return states;
}

uint64_t checked_file_size(const std::string& path, uint64_t listed, const std::string& context) {
  uint64_t bytes = 0;
  try {
    bytes = static_cast<uint64_t>(regular_file_size(path, kMaxMappedFile, "checkpoint file"));
  } catch (const IoError& e) {
    MT_THROW(DataError, e.what(), context);
  }
  MT_REQUIRE(bytes == listed, DataError, "checkpoint file ", path, " has ", bytes,
             " bytes but metadata.json says ", listed, bytes < listed ? " (truncated)" : "", context);
  return bytes;
}

std::string crc_hex(uint32_t crc) {
  char text[16];
  std::snprintf(text, sizeof(text), "%08x", crc);
  return text;
}

json layout_record(const ParallelConfig& p, int world_size) {
  return {{"dp", p.dp},
          {"tp", p.tp},
          {"pp", p.pp},
          {"cp", p.cp},
          {"ep", p.ep},
          {"zero", p.zero},
          {"dp_shard", p.dp_shard},
          {"virtual_stages", p.virtual_stages},
          {"world_size", world_size}};
}

namespace {
std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i)
    t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

int world_of(const ParallelConfig& p) {
  return static_cast<int>(p.dp * p.tp * p.pp * p.cp);
}
}  // namespace

json make_metadata(int64_t step, const TrainModel& model, const Config& cfg, const json& files) {
  json tensors = json::object();
  for (const ParamSpec& s : make_param_table(cfg.model).specs)
    tensors[s.name] = {{"shape", s.global_shape}, {"dtype", "F32"}};
  json config = json::object();
  for (const ConfigKey& k : config_keys())
    config[k.name] = config_get(cfg, k.name);
  json meta = {{"format_version", kCheckpointFormatVersion},
               {"step", step},
               {"bad_steps", model.bad_steps},
               {"adam_steps", model.optims.front()->steps_taken()},
               {"states", checkpoint_states(model)},
               {"seed", cfg.train.seed},
               {"layout", layout_record(cfg.parallel, world_of(cfg.parallel))},
               {"config", config},
               {"tensors", tensors},
               {"files", files}};
  json bias = json::object();  // the selection bias of every MoE layer here (docs/MODEL.md)
  for (const auto& chunk : model.chunks) {
    for (int64_t layer : chunk->moe_stats().layers) {
      if (const std::vector<float>* b = chunk->router_bias_of_layer(layer)) bias[std::to_string(layer)] = *b;
    }
  }
  if (!bias.empty()) meta["router_bias"] = bias;
  meta["metadata_crc32c"] = metadata_checksum(meta);
  return meta;
}

std::string metadata_checksum(json meta) {
  meta.erase("metadata_crc32c");
  return crc_hex(crc32c(meta.dump()));
}

json read_metadata(const std::string& dir) {
  const std::string path = (fs::path(dir) / "metadata.json").string();
  MT_REQUIRE(fs::exists(path), DataError, "checkpoint ", dir,
             ": metadata.json is missing (not a checkpoint, or one whose save never finished)");
  json meta;
  try {
    meta = json::parse(read_file(path, kMaxMetadataFile, "metadata.json"));
  } catch (const json::exception& e) {
    MT_THROW(DataError, path, ": not valid JSON (", e.what(), ")");
  }
  MT_REQUIRE(meta.is_object(), DataError, path, ": not a JSON object");
  const int version = meta.value("format_version", -1);
  MT_REQUIRE(version == kCheckpointFormatVersion, DataError, path, ": format_version ", version,
             " is not the ", kCheckpointFormatVersion, " this meshtrain reads",
             version == 1 ? " (a version-1 checkpoint has one checksum per file, not per slice: export it "
                            "with the meshtrain that wrote it and continue with --init-from)"
                          : "");
  // A damaged byte can leave valid JSON with another step, shape or CRC in it.
  const json stored = meta.value("metadata_crc32c", json());
  MT_REQUIRE(stored.is_string() && stored.get<std::string>() == metadata_checksum(meta), DataError, path,
             ": its own checksum (metadata_crc32c ", stored.dump(), ", computed ", metadata_checksum(meta),
             ") does not match: the file is corrupt");
  check_metadata_fields(meta, dir);
  return meta;
}

namespace {
// The integer field `key` of metadata.json, within [lo, hi]; DataError naming
// the checkpoint, the field, its value and the rule otherwise.
int64_t bounded_field(const json& meta, const std::string& dir, const char* key, int64_t lo, int64_t hi,
                      const char* rule) {
  const json v = meta.value(key, json());
  MT_REQUIRE(v.is_number_integer(), DataError, "checkpoint ", dir, ": metadata.json's ", key, " (", v.dump(),
             ") is not an integer");
  const int64_t n = v.get<int64_t>();
  MT_REQUIRE(n >= lo && n <= hi, DataError, "checkpoint ", dir, ": metadata.json's ", key, " (", n, ") ",
             rule);
  return n;
}
}  // namespace

void check_metadata_fields(const json& meta, const std::string& dir) {
  const int64_t step =
      bounded_field(meta, dir, "step", 0, std::numeric_limits<int64_t>::max(), "must be at least 0");
  const int64_t named = checkpoint_step(fs::path(dir).lexically_normal().filename().string());
  MT_REQUIRE(named < 0 || named == step, DataError, "checkpoint ", dir, ": metadata.json's step (", step,
             ") is not the step its folder is named after (", named, ")");
  bounded_field(meta, dir, "bad_steps", 0, step, "must lie in [0, step]");
  bounded_field(meta, dir, "adam_steps", 0, step, "must lie in [0, step] (one update per step at most)");
  for (const char* key : {"config", "tensors"})
    MT_REQUIRE(meta.contains(key) && meta.at(key).is_object(), DataError, "checkpoint ", dir,
               ": metadata.json has no \"", key, "\" object");
  for (const auto& [key, value] : meta.at("config").items())
    MT_REQUIRE(value.is_string(), DataError, "checkpoint ", dir, ": metadata.json's config has ", key, " = ",
               value.dump(), ", not a string");
}

namespace {
// The keys a resumed run must share with its checkpoint: every model key, and
// the optimizer's and the data's (the state was computed with them). Other
// keys (threads, logging, evaluation, checkpoint cadence) may change freely.
bool compared_on_resume(const std::string& key) {
  // Not train.microbatch_size: it only splits the batch, a layout choice.
  static const std::set<std::string> train_keys = {
      "train.steps",        "train.batch_size",   "train.seq_len",  "train.lr",       "train.min_lr",
      "train.warmup_steps", "train.weight_decay", "train.beta1",    "train.beta2",    "train.adam_eps",
      "train.grad_clip",    "train.seed",         "data.dir",       "data.ignore_id", "train.optimizer",
      "train.momentum",     "train.nesterov",     "train.precision"};
  return key.rfind("model.", 0) == 0 || train_keys.count(key) != 0;
}

// The compared key `item` names: itself when it has a section ("model.max_seq_len"),
// else the one compared key of that name in any section ("max_seq_len",
// "seed", "ignore_id"); ConfigError naming it when there is none.
std::string compared_key(const std::string& item) {
  std::string key;
  if (item.find('.') != std::string::npos) {
    if (compared_on_resume(item)) key = item;
  } else {
    for (const ConfigKey& k : config_keys())
      if (compared_on_resume(k.name) && k.name.substr(k.name.find('.') + 1) == item) key = k.name;
  }
  MT_REQUIRE(!key.empty(), ConfigError, "train.resume_allow names '", item,
             "', which is not a model, optimizer or data key compared on resume");
  return key;
}

// train.resume_allow as full key names ("seed" and "train.seed" alike);
// ConfigError for a name that is not a compared key.
std::set<std::string> parse_resume_allow(const std::string& allow) {
  std::set<std::string> out;
  std::stringstream in(allow);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(std::remove(item.begin(), item.end(), ' '), item.end());
    if (item.empty()) continue;
    out.insert(compared_key(item));
  }
  return out;
}

// Every compared key of the checkpoint's config equals the run's, or is allowed.
void check_resume_config(const std::string& dir, const json& saved, const Config& cfg) {
  const std::set<std::string> allowed = parse_resume_allow(cfg.train.resume_allow);
  for (const ConfigKey& k : config_keys()) {
    if (!compared_on_resume(k.name) || allowed.count(k.name) != 0) continue;
    MT_REQUIRE(saved.contains(k.name), ConfigError, "--resume ", dir, ": the checkpoint's config has no ",
               k.name, " (this run's is ", config_get(cfg, k.name),
               "; list it in train.resume_allow to continue with this run's value)");
    const std::string mine = config_get(cfg, k.name), theirs = saved.at(k.name).get<std::string>();
    MT_REQUIRE(mine == theirs, ConfigError, "--resume ", dir, ": ", k.name, " is ", theirs,
               " in the checkpoint but ", mine,
               " in this run (list it in train.resume_allow to continue "
               "with this run's value)");
  }
}
// The reduction mode (parallel/canonical.h) is kept across a resume, and in
// the canonical mode its grain too: the microbatch, the atom of the gradient
// tree. A checkpoint whose config lacks the key was saved in the default mode.
void check_resume_reduction(const std::string& dir, const json& saved, const Config& cfg) {
  const std::string theirs = saved.contains("parallel.reduction")
                                 ? saved.at("parallel.reduction").get<std::string>()
                                 : std::string("default");
  MT_REQUIRE(theirs == cfg.parallel.reduction, ConfigError, "--resume ", dir, ": parallel.reduction is ",
             theirs, " in the checkpoint but ", cfg.parallel.reduction,
             " in this run: the mode is kept across a resume (docs/PARALLELISM.md \"The canonical mode\")");
  if (theirs != "canonical") return;
  // A canonical checkpoint without the tp grain was saved before it existed, with no pieces.
  const std::string c = saved.contains("parallel.canonical_tp")
                            ? saved.at("parallel.canonical_tp").get<std::string>()
                            : std::string("1");
  MT_REQUIRE(c == config_get(cfg, "parallel.canonical_tp"), ConfigError, "--resume ", dir,
             ": parallel.canonical_tp is ", c, " in the checkpoint but ",
             config_get(cfg, "parallel.canonical_tp"),
             " in this run: in the canonical mode it fixes the pieces of every tp-split sum, kept across a "
             "resume");
  // Likewise the cp grain: a checkpoint without it was saved with none.
  const std::string g = saved.contains("parallel.canonical_cp")
                            ? saved.at("parallel.canonical_cp").get<std::string>()
                            : std::string("1");
  MT_REQUIRE(
      g == config_get(cfg, "parallel.canonical_cp"), ConfigError, "--resume ", dir,
      ": parallel.canonical_cp is ", g, " in the checkpoint but ", config_get(cfg, "parallel.canonical_cp"),
      " in this run: in the canonical mode it fixes the pieces of every sequence, kept across a resume");
  {
    // The d grain likewise (canonical_tp_grid.h); without the key: 1.
    const std::string gd = saved.contains("parallel.canonical_tp_d")
                               ? saved.at("parallel.canonical_tp_d").get<std::string>()
                               : std::string("1");
    MT_REQUIRE(gd == config_get(cfg, "parallel.canonical_tp_d"), ConfigError, "--resume ", dir,
               ": parallel.canonical_tp_d is ", gd, " in the checkpoint but ",
               config_get(cfg, "parallel.canonical_tp_d"),
               " in this run: in the canonical mode it fixes the d pieces of every sum over the model width, "
               "kept across a resume");
  }
  if (!saved.contains("train.microbatch_size")) return;
  const std::string mb = saved.at("train.microbatch_size").get<std::string>();
  MT_REQUIRE(
      mb == config_get(cfg, "train.microbatch_size"), ConfigError, "--resume ", dir,
      ": train.microbatch_size is ", mb, " in the checkpoint but ", config_get(cfg, "train.microbatch_size"),
      " in this run: in the canonical mode the microbatch is the atom of the gradient tree, kept across "
      "a resume");
}
}  // namespace

void check_resume(const std::string& dir, const Config& cfg, int /*world_size: any; the loader reshards*/) {
  const json meta = read_metadata(dir);
  const json& tensors = meta.at("tensors");
  for (const ParamSpec& s : make_param_table(cfg.model).specs) {
    MT_REQUIRE(tensors.contains(s.name), ConfigError, "--resume ", dir, ": the checkpoint holds no tensor '",
               s.name, "' of this run's model (a different model?)");
    const std::vector<int64_t> saved = tensors.at(s.name).at("shape").get<std::vector<int64_t>>();
    MT_REQUIRE(saved == s.global_shape, ConfigError, "--resume ", dir, ": tensor '", s.name, "' has shape ",
               shape_text(saved), " in the checkpoint but ", shape_text(s.global_shape),
               " in this run's model");
  }
  MT_REQUIRE(tensors.size() == make_param_table(cfg.model).specs.size(), ConfigError, "--resume ", dir,
             ": the checkpoint holds ", tensors.size(), " tensors, this run's model ",
             make_param_table(cfg.model).specs.size(), " (a different model)");
  check_resume_config(dir, meta.at("config"), cfg);
  check_resume_reduction(dir, meta.at("config"), cfg);
}

void check_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  MT_REQUIRE(!fs::exists(dir, ec) || fs::is_directory(dir, ec), IoError, "train.checkpoint_dir '", dir,
             "' exists and is not a directory");
  check_dir_writable((fs::path(dir) / "write-probe").string());  // creates dir, then a staging folder in it
}

}  // namespace mt
