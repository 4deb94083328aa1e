// Independent checks against Python (struct + json + numpy, no safetensors
// package): files we write are parsed there, files written there are read here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "formats/test_util.h"

namespace mt {
namespace {

using testing::TempDir;

const char* const kPython = "/usr/bin/python3";
const std::string kTool = std::string(MT_TEST_DIR) + "/safetensors_tool.py";

// Empty when Python with numpy is usable, else the reason to skip.
std::string python_missing() {
  if (::access(kPython, X_OK) != 0) return std::string(kPython) + " is not installed";
  const std::string cmd = std::string(kPython) + " -c 'import numpy' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return std::string(kPython) + " has no numpy";
  return "";
}

// Runs `cmd`, returns its standard output; fails the test on a non-zero exit.
std::string run(const std::string& cmd) {
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << cmd;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0)
    out.append(buf, n);
  EXPECT_EQ(::pclose(pipe), 0) << "command failed: " << cmd;
  return out;
}

TEST(PythonInterop, PythonParsesWhatWeWrite) {
  if (const std::string why = python_missing(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string path = dir.file("ours.safetensors");
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> w(3 * 5 * 7), v(11);
  for (float& x : w)
    x = normal(rng);
  for (float& x : v)
    x = normal(rng) * 1e-30f;  // tiny values survive the text round trip too
  const float s = -0.0f;
  write_safetensors(
      path, {{"w", {3, 5, 7}, w.data()}, {"v", {11}, v.data()}, {"s", {}, &s}, {"e", {4, 0}, nullptr}},
      {{"format", "pt"}, {"note", "ünïcödé \"quoted\""}});

  const auto out = nlohmann::json::parse(run(std::string(kPython) + " " + kTool + " dump " + path));
  EXPECT_EQ(out["metadata"], (nlohmann::json{{"format", "pt"}, {"note", "ünïcödé \"quoted\""}}));
  EXPECT_EQ(out["names"], (nlohmann::json{"w", "v", "s", "e"}));
  const auto& t = out["tensors"];
  EXPECT_EQ(t["w"]["shape"], (nlohmann::json{3, 5, 7}));
  EXPECT_EQ(t["s"]["shape"], nlohmann::json::array());
  EXPECT_EQ(t["e"]["shape"], (nlohmann::json{4, 0}));
  ASSERT_EQ(t["w"]["values"].size(), w.size());
  ASSERT_EQ(t["v"]["values"].size(), v.size());
  // Python prints each fp32 as the shortest double that round-trips: exact.
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_EQ(static_cast<float>(t["w"]["values"][i].get<double>()), w[i]);
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ(static_cast<float>(t["v"]["values"][i].get<double>()), v[i]);
  EXPECT_TRUE(std::signbit(t["s"]["values"][0].get<double>()));
  EXPECT_TRUE(t["e"]["values"].empty());
}

TEST(PythonInterop, WeReadWhatPythonWrites) {
  if (const std::string why = python_missing(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  const std::string path = dir.file("theirs.safetensors");
  run(std::string(kPython) + " " + kTool + " write " + path);
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"writer", "python"}}));
  ASSERT_TRUE(f.has("model.embed_tokens.weight"));
  EXPECT_EQ(f.shape("model.embed_tokens.weight"), (std::vector<int64_t>{2, 3, 4}));
  std::vector<float> e(24);
  f.read_f32("model.embed_tokens.weight", e.data(), 24);
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(e[i], 0.5f * static_cast<float>(i) - 3.0f) << i;
  float s = 0;
  f.read_f32("scalar", &s, 1);
  EXPECT_EQ(s, 2.5f);

  // All 65536 bit patterns of each 16-bit format against Python's fp32 values.
  for (const std::string kind : {"f16", "bf16"}) {
    const std::string name = "all_" + kind;
    ASSERT_EQ(f.numel(name), 65536) << name;
    std::vector<float> got(65536), want(65536);
    f.read_f32(name, got.data(), 65536);
    f.read_f32(name + "_as_f32", want.data(), 65536);
    int mismatches = 0;
    for (int i = 0; i < 65536; ++i) {
      const bool same = std::isnan(want[i])
                            ? std::isnan(got[i])
                            : std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i]);
      if (!same && ++mismatches <= 5)
        ADD_FAILURE() << name << " pattern " << i << ": " << got[i] << " vs " << want[i];
    }
    EXPECT_EQ(mismatches, 0) << name;
  }
}

}  // namespace
}  // namespace mt
