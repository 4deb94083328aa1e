// Seeded mutations of config.json (Hugging Face) and of a TOML run config:
// every mutated file is refused with one of meshtrain's errors, or it loads a
// configuration whose every differing field sits on a line the mutation
// touched (the key's line, or for TOML its section's header line).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <utility>

#include "config/config.h"
#include "core/error.h"
#include "formats/hf_config.h"
#include "fuzz/mutate.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using Span = std::pair<size_t, size_t>;

// The line of `text` holding byte `at`, as [begin, end) including its newline.
Span line_of(const std::string& text, size_t at) {
  const size_t b = text.rfind('\n', at == 0 ? 0 : at - 1);
  const size_t e = text.find('\n', at);
  return {b == std::string::npos || at == 0 ? 0 : b + 1, e == std::string::npos ? text.size() : e + 1};
}

std::map<std::string, std::string> fields(const HfLlamaConfig& c) {
  return {{"vocab_size", std::to_string(c.vocab_size)},
          {"hidden_size", std::to_string(c.hidden_size)},
          {"intermediate_size", std::to_string(c.intermediate_size)},
          {"num_hidden_layers", std::to_string(c.num_hidden_layers)},
          {"num_attention_heads", std::to_string(c.num_attention_heads)},
          {"num_key_value_heads", std::to_string(c.num_key_value_heads)},
          {"max_position_embeddings", std::to_string(c.max_position_embeddings)},
          {"rope_theta", std::to_string(c.rope_theta)},
          {"rms_norm_eps", std::to_string(c.rms_norm_eps)},
          {"tie_word_embeddings", std::to_string(c.tie_word_embeddings)}};
}

TEST(Fuzz, HfConfigJson) {
  const std::string path = fuzz::scratch("fuzzcfg", "config.json");
  HfLlamaConfig c;
  c.vocab_size = 32000;
  c.hidden_size = 256;
  c.intermediate_size = 688;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 1024;
  c.rope_theta = 500000.0;
  c.rms_norm_eps = 1e-6;
  write_hf_config(path, c);
  const std::string orig = fuzz::slurp(path);
  const auto want = fields(c);
  const std::string mpath = fuzz::scratch("fuzzcfg", "mutated.json");
  fuzz::run_mutations("config.json", orig, mpath, 2, 1500, [&](int it, const fuzz::Mutation& m) {
    const auto got = fields(read_hf_config(mpath));
    for (const auto& [key, value] : want) {
      if (got.at(key) == value) continue;
      const Span line = line_of(orig, orig.find("\"" + key + "\""));
      EXPECT_TRUE(m.touches(line.first, line.second))
          << "iteration " << it << ": " << key << " changed from " << value << " to " << got.at(key)
          << " though mutation kind " << m.kind << " at byte " << m.pos << " is not on its line";
    }
  });
  fs::remove_all(fs::path(path).parent_path());
}

TEST(Fuzz, TomlConfig) {
  const std::string orig =
      "# run config\n[model]\nvocab_size = 8192\nd_model = 64\nn_layers = 2\nn_heads = 4\nn_kv_heads = 2\n"
      "ffn_hidden = 160\nmax_seq_len = 64\nrope_theta = 10000.0\ntie_embeddings = false\n\n[train]\nsteps = "
      "20\n"
      "batch_size = 8\nmicrobatch_size = 4\nseq_len = 64\nlr = 3e-3\nwarmup_steps = 2\n\n[data]\n"
      "dir = \"data/fortunes\"\n\n[parallel]\nschedule = \"1f1b\"\ntimeout_s = 300.0\n";
  const std::string path = fuzz::scratch("fuzzcfg", "run.toml");
  fuzz::spit(path, orig);
  const Config ref = load_config(path, {});
  // Each key's line, and its section's header line.
  std::map<std::string, std::pair<Span, Span>> where;
  Span header{0, 0};
  std::string section;
  for (size_t at = 0; at < orig.size();) {
    const Span line = line_of(orig, at);
    const std::string text = orig.substr(line.first, line.second - line.first);
    if (!text.empty() && text[0] == '[') {
      header = line;
      section = text.substr(1, text.find(']') - 1);
    } else if (text.find(" = ") != std::string::npos) {
      where[section + "." + text.substr(0, text.find(" = "))] = {line, header};
    }
    at = line.second;
  }
  fuzz::run_mutations("TOML", orig, path, 3, 1000, [&](int it, const fuzz::Mutation& m) {
    const Config got = load_config(path, {});
    for (const ConfigKey& k : config_keys()) {
      const std::string a = config_get(ref, k.name), b = config_get(got, k.name);
      if (a == b) continue;
      const auto w = where.find(k.name);
      const bool ok = w != where.end() && (m.touches(w->second.first.first, w->second.first.second) ||
                                           m.touches(w->second.second.first, w->second.second.second));
      EXPECT_TRUE(ok) << "iteration " << it << ": " << k.name << " changed from " << a << " to " << b
                      << " though mutation kind " << m.kind << " at byte " << m.pos << " is elsewhere";
    }
  });
  fs::remove_all(fs::path(path).parent_path());
}

}  // namespace
}  // namespace mt
