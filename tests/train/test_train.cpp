#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "cost/flops.h"
#include "data/token_file.h"
#include "model/llama.h"
#include "ops/gemm.h"
#include "train/model_io.h"
#include "train/trainer.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

// A corpus with structure to learn: token t is followed by (3t + 1) mod 61 most of the time.
fs::path make_data(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::create_directories(dir);
  std::vector<int32_t> tokens;
  int32_t t = 1;
  for (int i = 0; i < 6000; ++i) {
    tokens.push_back(t);
    t = (i % 17 == 0) ? static_cast<int32_t>((t * 7 + i) % 61) : (3 * t + 1) % 61;
  }
  write_token_file((dir / "train.bin").string(), tokens, 61);
  tokens.resize(1000);
  write_token_file((dir / "val.bin").string(), tokens, 61);
  return dir;
}

Config tiny(const fs::path& data) {
  Config c;
  c.model.vocab_size = 61;
  c.model.d_model = 32;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.ffn_hidden = 48;
  c.model.max_seq_len = 32;
  c.train.steps = 4;
  c.train.batch_size = 4;
  c.train.microbatch_size = 2;
  c.train.seq_len = 32;
  c.train.lr = 1e-2;
  c.train.min_lr = 1e-3;
  c.train.warmup_steps = 1;
  c.train.eval_every = 2;
  c.train.eval_windows = 4;
  c.train.threads = 2;
  c.data.dir = data.string();
  return c;
}

// Config::validate's copy of c: the run reads the typed keys it parses.
Config valid(Config c) {
  c.validate();
  return c;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(Training, SameConfigTwiceIsBitwiseIdentical) {
  const fs::path data = make_data("det");
  const Config cfg = tiny(data);
  RunOptions o;
  o.quiet = true;
  o.save_dir = (data / "a").string();
  const RunResult a = run_training(valid(cfg), o);
  o.save_dir = (data / "b").string();
  const RunResult b = run_training(valid(cfg), o);
  ASSERT_EQ(a.steps.size(), 4u);
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << i;
    EXPECT_EQ(a.steps[i].grad_norm, b.steps[i].grad_norm) << "step " << i;
  }
  EXPECT_EQ(a.val_losses, b.val_losses);
  EXPECT_EQ(file_bytes(data / "a" / "model.safetensors"), file_bytes(data / "b" / "model.safetensors"));
}

TEST(Training, RecomputeGivesBitwiseTheSameRun) {
  const fs::path data = make_data("recompute");
  Config cfg = tiny(data);
  RunOptions o;
  o.quiet = true;
  const RunResult a = run_training(valid(cfg), o);
  for (const char* mode : {"true", "selective"}) {
    cfg.train.recompute = mode;
    cfg.train.recompute_modules = "attention,mlp,norms";
    const RunResult b = run_training(valid(cfg), o);
    for (size_t i = 0; i < a.steps.size(); ++i)
      EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << mode;
  }
}

TEST(Training, LossFallsOnALearnableCorpus) {
  const fs::path data = make_data("learn");
  Config cfg = tiny(data);
  cfg.train.steps = 40;
  cfg.train.eval_every = 40;
  RunOptions o;
  o.quiet = true;
  const RunResult r = run_training(valid(cfg), o);
  EXPECT_NEAR(r.steps.front().loss, std::log(61.0), 0.3);  // uniform prediction at initialisation
  EXPECT_LT(r.steps.back().loss, 0.6 * r.steps.front().loss);
  ASSERT_EQ(r.val_losses.size(), 1u);
  EXPECT_LT(r.val_losses[0].second, 0.6 * r.steps.front().loss);
}

TEST(Training, MetricsFileHasOneObjectPerStepAndValidation) {
  const fs::path data = make_data("metrics");
  const Config cfg = tiny(data);
  RunOptions o;
  o.quiet = true;
  o.metrics_path = (data / "m.jsonl").string();
  run_training(valid(cfg), o);
  std::ifstream f(o.metrics_path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);)
    lines.push_back(l);
  // The header, then per step its line and the one rank's line, a validation every 2 steps
  // (docs/FORMATS.md "Metrics file").
  ASSERT_EQ(lines.size(), 11u);
  EXPECT_EQ(lines[0].rfind("{\"header\":", 0), 0u);
  for (const char* key : {"\"step\":", "\"loss\":", "\"lr\":", "\"grad_norm\":", "\"tokens\":",
                          "\"step_time_s\":", "\"tokens_per_s\":", "\"mfu\":", "\"mfu_ceiling_gflops\":",
                          "\"mfu_ceiling\":", "\"mem_peak_bytes\":"}) {
    EXPECT_NE(lines[1].find(key), std::string::npos) << key;
  }
  EXPECT_NE(lines[2].find("\"rank\":0"), std::string::npos);
  EXPECT_NE(lines[2].find("\"time_s\":"), std::string::npos);
  EXPECT_NE(lines[5].find("\"val_loss\":"), std::string::npos);
}

// The ceiling is the best SGEMM measurement raised to the best rate a step
// achieved: a step faster than every measurement has MFU 1, not more.
TEST(Training, MfuCeilingBoundsEveryStep) {
  MfuCeiling c;
  c.measured(10);
  EXPECT_DOUBLE_EQ(c.mfu(5), 0.5);
  EXPECT_STREQ(c.source(), "sgemm");
  EXPECT_DOUBLE_EQ(c.mfu(25), 1.0);  // measured while other work held the cores
  EXPECT_STREQ(c.source(), "achieved");
  EXPECT_DOUBLE_EQ(c.gflops(), 25);
  EXPECT_DOUBLE_EQ(c.mfu(5), 0.2);  // against the best seen so far
  c.measured(8);                    // a worse window changes nothing
  EXPECT_DOUBLE_EQ(c.gflops(), 25);
  c.measured(50);
  EXPECT_DOUBLE_EQ(c.mfu(25), 0.5);
  EXPECT_STREQ(c.source(), "sgemm");
  EXPECT_DOUBLE_EQ(MfuCeiling().mfu(0), 0.0);
  MfuCeiling named("bf16 onednn gemm");  // a bf16 run's ceiling names its measurement
  named.measured(40);
  EXPECT_DOUBLE_EQ(named.mfu(10), 0.25);
  EXPECT_STREQ(named.source(), "bf16 onednn gemm");
  EXPECT_DOUBLE_EQ(named.mfu(80), 1.0);
  EXPECT_STREQ(named.source(), "achieved");
}

// A bf16 run's MFU is against the bf16 kernel's measured rate, named in each
// step's mfu_ceiling (flops.h matmul_ceiling_name), an fp32 run's against the
// SGEMM rate; never above 1 either way.
TEST(Training, MfuCeilingIsTheRateOfTheRunsOwnProducts) {
  const fs::path data = make_data("mfu_bf16");
  Config cfg = tiny(data);
  cfg.train.steps = 3;
  cfg.train.eval_every = 0;
  RunOptions o;
  o.quiet = true;
  { const MatmulPrecisionGuard choose(MatmulPrecision::bf16); }  // the kernel is chosen once, here
  const Bf16Kernel previous = bf16_kernel();
  std::vector<std::pair<std::string, const char*>> runs{{"fp32", "sgemm"}, {"bf16", "bf16 emulated gemm"}};
  if (onednn_bf16_unavailable().empty()) runs.emplace_back("bf16", "bf16 onednn gemm");
  for (const auto& [precision, name] : runs) {
    set_bf16_kernel(std::string(name) == "bf16 onednn gemm" ? Bf16Kernel::onednn : Bf16Kernel::emulated);
    cfg.train.precision = precision;
    const RunResult r = run_training(valid(cfg), o);
    ASSERT_EQ(r.steps.size(), 3u);
    EXPECT_GT(r.sgemm_gflops, 0.0);
    for (const StepStats& s : r.steps) {
      const std::string source = s.mfu_ceiling;
      EXPECT_TRUE(source == name || source == "achieved") << name << ": " << source;
      EXPECT_GT(s.mfu, 0.0);
      EXPECT_LE(s.mfu, 1.0);
      // The ceiling is the start-up measurement unless a step beat it.
      if (source == name) {
        EXPECT_EQ(s.mfu_ceiling_gflops, r.sgemm_gflops) << name;
      } else {
        EXPECT_GT(s.mfu_ceiling_gflops, r.sgemm_gflops) << name;
      }
    }
  }
  set_bf16_kernel(previous);
}

TEST(Training, InitFromContinuesFromASavedModel) {
  const fs::path data = make_data("init");
  Config cfg = tiny(data);
  RunOptions o;
  o.quiet = true;
  o.save_dir = (data / "m").string();
  const RunResult first = run_training(valid(cfg), o);
  o.save_dir.clear();
  o.init_from = (data / "m").string();
  cfg.train.steps = 1;
  const RunResult second = run_training(valid(cfg), o);
  // The saved model was trained: its loss is below the fresh initialisation's.
  EXPECT_LT(second.steps[0].loss, first.steps[0].loss);
  // Another model: refused at start-up naming the field, and by the loader naming the tensor.
  cfg.model.d_model = 64;
  EXPECT_THROW(validate_run(cfg, o, 1, 0), ConfigError);
  EXPECT_THROW(run_training(valid(cfg), o), DataError);
}

TEST(Training, NonFiniteStepsAreSkippedThenTheRunStops) {
  const fs::path data = make_data("nan");
  Config cfg = tiny(data);
  {
    ModelOptions mo;
    mo.max_batch = 2;
    mo.max_seq = 32;
    Llama m(cfg.model, mo);
    m.init(1);
    m.params()[m.param_table().find("model.norm.weight").offset] = std::numeric_limits<float>::quiet_NaN();
    save_model_dir((data / "poisoned").string(), m);
  }
  RunOptions o;
  o.quiet = true;
  o.init_from = (data / "poisoned").string();
  cfg.train.steps = 2;
  cfg.train.max_bad_steps = 3;
  cfg.train.eval_every = 0;
  // Two bad steps are skipped, not fatal, but the run then ends with the NaN
  // still in its parameters: it fails at the end, saving nothing.
  o.metrics_path = (data / "nan.jsonl").string();
  o.save_dir = (data / "nan_model").string();
  try {
    run_training(valid(cfg), o);
    FAIL() << "expected the run to fail at its end";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the run diverged: 1 parameter element(s) are not finite"),
              std::string::npos)
        << e.what();
  }
  std::ifstream metrics(o.metrics_path);
  std::string line;
  int skipped = 0;
  while (std::getline(metrics, line))
    skipped += line.find("\"skipped\":true") != std::string::npos;
  EXPECT_EQ(skipped, 2);
  EXPECT_FALSE(fs::exists(o.save_dir));
  o.metrics_path.clear();
  o.save_dir.clear();
  cfg.train.steps = 5;
  try {
    run_training(valid(cfg), o);
    FAIL() << "expected the run to stop";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stopping at step 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_bad_steps = 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mt
