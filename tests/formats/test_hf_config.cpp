// config.json of Hugging Face Llama models: round trip, defaults, errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "formats/hf_config.h"
#include "formats/test_util.h"

namespace mt {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

HfLlamaConfig small_config() {
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
  c.tie_word_embeddings = true;
  return c;
}

// A minimal config.json as published models have it, with `edit` applied.
std::string config_text(const nlohmann::json& edit) {
  nlohmann::json j = {{"vocab_size", 100},      {"hidden_size", 64},        {"intermediate_size", 128},
                      {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"max_position_embeddings", 256},
                      {"rms_norm_eps", 1e-5}};
  j.merge_patch(edit);  // a null value removes the key
  return j.dump();
}

// Expects read_hf_config of `text` to throw ConfigError mentioning `needle`.
void expect_config_error(const TempDir& dir, const std::string& text, const std::string& needle) {
  const std::string path = dir.file("config.json");
  testing::write_bytes(path, text);
  try {
    read_hf_config(path);
    ADD_FAILURE() << "expected ConfigError containing \"" << needle << "\"";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

TEST(HfConfig, RoundTripAndFixedKeys) {
  TempDir dir;
  const std::string path = dir.file("config.json");
  const HfLlamaConfig c = small_config();
  write_hf_config(path, c);
  const HfLlamaConfig r = read_hf_config(path);
  EXPECT_EQ(r.vocab_size, c.vocab_size);
  EXPECT_EQ(r.hidden_size, c.hidden_size);
  EXPECT_EQ(r.intermediate_size, c.intermediate_size);
  EXPECT_EQ(r.num_hidden_layers, c.num_hidden_layers);
  EXPECT_EQ(r.num_attention_heads, c.num_attention_heads);
  EXPECT_EQ(r.num_key_value_heads, c.num_key_value_heads);
  EXPECT_EQ(r.max_position_embeddings, c.max_position_embeddings);
  EXPECT_EQ(r.rope_theta, c.rope_theta);
  EXPECT_EQ(r.rms_norm_eps, c.rms_norm_eps);
  EXPECT_EQ(r.tie_word_embeddings, c.tie_word_embeddings);

  const auto j = nlohmann::json::parse(testing::read_bytes(path));
  EXPECT_EQ(j["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["torch_dtype"], "float32");
  EXPECT_EQ(j["attention_bias"], false);
  EXPECT_EQ(j["mlp_bias"], false);
  EXPECT_EQ(j["rms_norm_eps"].get<double>(), 1e-6);
}

TEST(HfConfig, DefaultsAsInTransformers) {
  TempDir dir;
  const std::string path = dir.file("config.json");
  testing::write_bytes(path, config_text({{"num_key_value_heads", nullptr}}));
  HfLlamaConfig c = read_hf_config(path);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  // An explicit null means the same as absence.
  testing::write_bytes(path,
                       R"({"vocab_size":100,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,)"
                       R"("num_attention_heads":4,"max_position_embeddings":256,"rms_norm_eps":1e-5,)"
                       R"("num_key_value_heads":null,"rope_theta":null,"rope_scaling":null})");
  c = read_hf_config(path);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.rope_theta, 10000.0);
}

TEST(HfConfig, MissingKeysAndWrongTypesNameTheKey) {
  TempDir dir;
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "max_position_embeddings", "rms_norm_eps"}) {
    expect_config_error(dir, config_text({{key, nullptr}}),
                        std::string("key '") + key + "' is required but missing");
  }
  expect_config_error(dir, config_text({{"hidden_size", "64"}}),
                      "key 'hidden_size' must be an integer, got \"64\"");
  expect_config_error(dir, config_text({{"num_hidden_layers", 2.5}}),
                      "key 'num_hidden_layers' must be an integer");
  expect_config_error(dir, config_text({{"rope_theta", "big"}}), "key 'rope_theta' must be a number");
  expect_config_error(dir, config_text({{"tie_word_embeddings", 1}}),
                      "key 'tie_word_embeddings' must be true or false");
  expect_config_error(dir, "{\"vocab_size\": ", "is not valid JSON");
  expect_config_error(dir, "[]", "must be a JSON object");
}

TEST(HfConfig, RejectsValuesAndFeaturesWeCannotHonour) {
  TempDir dir;
  expect_config_error(dir, config_text({{"num_attention_heads", 5}}),
                      "hidden_size (64) must be divisible by num_attention_heads (5)");
  expect_config_error(dir, config_text({{"num_key_value_heads", 3}}),
                      "num_attention_heads (4) must be divisible by num_key_value_heads (3)");
  expect_config_error(dir, config_text({{"vocab_size", 0}}), "vocab_size (0) must be positive");
  expect_config_error(dir, config_text({{"model_type", "mistral"}}),
                      "only 'llama', 'mixtral' and 'meshtrain_moe' are supported");
  expect_config_error(dir, config_text({{"hidden_act", "gelu"}}), "only 'silu' is supported");
  expect_config_error(dir, config_text({{"attention_bias", true}}), "key 'attention_bias' is true");
  expect_config_error(dir, config_text({{"rope_scaling", {{"rope_type", "llama3"}}}}),
                      "key 'rope_scaling': RoPE scaling 'llama3' needs the field 'factor'");
  expect_config_error(dir, config_text({{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 2.0}}}}),
                      "unknown RoPE scaling type 'longrope'");
  expect_config_error(
      dir, config_text({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0}, {"mscale", 1}}}}),
      "RoPE scaling type 'yarn' has no field 'mscale'");
  expect_config_error(dir,
                      config_text({{"rope_scaling",
                                    {{"rope_type", "llama3"},
                                     {"factor", 8.0},
                                     {"low_freq_factor", 1.0},
                                     {"high_freq_factor", 4.0}}}}),
                      "'llama3' needs the field 'original_max_position_embeddings'");
  expect_config_error(dir, config_text({{"head_dim", 32}}),
                      "head_dim' (32) must equal hidden_size / num_attention_heads (16)");
  // head_dim equal to the derived value is fine.
  const std::string path = dir.file("config.json");
  testing::write_bytes(path, config_text({{"head_dim", 16}}));
  EXPECT_EQ(read_hf_config(path).hidden_size, 64);
}

TEST(HfConfig, ReadsRopeThetaInBothSpellings) {
  // transformers 5 writes rope_theta inside rope_parameters; reading only the
  // top-level key would default it to 10000 and load such a model wrong.
  TempDir dir;
  const std::string path = dir.file("config.json");
  testing::write_bytes(
      path, config_text({{"rope_parameters", {{"rope_theta", 500000.0}, {"rope_type", "default"}}}}));
  EXPECT_EQ(read_hf_config(path).rope_theta, 500000.0);
  testing::write_bytes(path, config_text({{"rope_theta", 250000.0}}));
  EXPECT_EQ(read_hf_config(path).rope_theta, 250000.0);
  testing::write_bytes(
      path, config_text({{"rope_theta", 500000.0}, {"rope_parameters", {{"rope_theta", 500000.0}}}}));
  EXPECT_EQ(read_hf_config(path).rope_theta, 500000.0);
  expect_config_error(dir, config_text({{"rope_theta", 1e4}, {"rope_parameters", {{"rope_theta", 5e5}}}}),
                      "holds rope_theta 500000 but the top-level rope_theta is 10000");
  expect_config_error(dir, config_text({{"rope_parameters", {{"rope_theta", 5e5}, {"rope_type", "llama3"}}}}),
                      "key 'rope_parameters': RoPE scaling 'llama3' needs the field 'factor'");
  expect_config_error(dir, config_text({{"rope_parameters", 3}}), "key 'rope_parameters' must be an object");
  expect_config_error(dir, config_text({{"num_local_experts", 8}}),
                      "a mixture of experts needs model_type 'mixtral'");
  // A scaling in either spelling (and the older "type" key) reads into model.rope_scaling's spelling.
  testing::write_bytes(
      path,
      config_text({{"rope_parameters", {{"rope_theta", 5e5}, {"rope_type", "yarn"}, {"factor", 7.8125}}}}));
  EXPECT_EQ(read_hf_config(path).rope_scaling, "yarn,factor=7.8125,beta_fast=32,beta_slow=1");
  testing::write_bytes(path, config_text({{"rope_scaling", {{"type", "linear"}, {"factor", 4}}}}));
  EXPECT_EQ(read_hf_config(path).rope_scaling, "linear,factor=4");
  expect_config_error(dir,
                      config_text({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 4}}},
                                   {"rope_parameters", {{"rope_type", "linear"}, {"factor", 2}}}}),
                      "holds the scaling linear,factor=2 but rope_scaling holds linear,factor=4");
}

TEST(HfConfig, RopeScalingRoundTrips) {
  TempDir dir;
  const std::string path = dir.file("config.json");
  for (const char* spec :
       {"none", "linear,factor=7.8125", "dynamic,factor=2,original_max_position_embeddings=128",
        "yarn,factor=8,original_max_position_embeddings=128,beta_fast=16,beta_slow=2,"
        "attention_factor=1.5",
        "llama3,factor=8,original_max_position_embeddings=8192,low_freq_factor=1,"
        "high_freq_factor=4"}) {
    testing::write_bytes(path, config_text(nlohmann::json::object()));
    HfLlamaConfig c = read_hf_config(path);
    c.rope_scaling = spec;
    write_hf_config(path, c);
    EXPECT_EQ(read_hf_config(path).rope_scaling, spec);
  }
}

TEST(HfConfig, WriteRejectsInvalidConfigAndMissingFileIsIoError) {
  TempDir dir;
  HfLlamaConfig c = small_config();
  c.num_key_value_heads = 3;
  EXPECT_THROW(write_hf_config(dir.file("config.json"), c), ConfigError);
  EXPECT_THROW(read_hf_config(dir.file("config.json")), IoError);
}

}  // namespace
}  // namespace mt
