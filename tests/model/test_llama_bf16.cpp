// The model's forward under train.precision = bf16 (docs/MODEL.md "Precision")
// against the PyTorch reference of the same rule (tests/python/llama_reference.py
// with its bf16 argument: float64 arithmetic, every matmul operand rounded to
// bf16 by torch's cast). The forward of the initial weights on a batch is a
// training run's first-step loss. Skipped when torch is missing, except under
// CI=true (as test_llama.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/llama.h"
#include "ops/gemm.h"
#include "reference_io.h"
#include "train/model_io.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using testing_ref::read_f64;
using testing_ref::rel_l2;

ModelConfig bf16_config() {
  ModelConfig c;
  c.vocab_size = 61;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 40;
  c.max_seq_len = 16;
  c.rope_theta = 500.0;
  c.init_std = 0.2;  // large enough that every product's rounding matters
  return c;
}

struct Forward {
  double loss = 0;
  std::vector<float> logits;
};

Forward forward(Llama& model, const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets,
                int64_t B, int64_t T) {
  const double loss = model.forward(inputs.data(), targets.data(), B, T) / static_cast<double>(B * T);
  return {loss, std::vector<float>(model.logits(), model.logits() + B * T * model.config().vocab_size)};
}

// Under bf16 the loss and logits equal the reference's within what fp32
// arithmetic between the products leaves (an fp32 value ~1e-7 away from the
// reference's float64 one can round to the neighbouring bf16 value): measured
// 2e-9 (loss, relative) and 3.3e-8 (logits, relative L2); bounds 1e-6 and
// 1e-5. The fp32 forward misses the same reference by far more (measured
// 3e-4 in the loss, 1.2e-2 in the logits), so the bounds tell the rules apart.
TEST(LlamaVsPyTorch, Bf16MatmulsLossAndLogits) {
  const ModelConfig cfg = bf16_config();
  const int64_t B = 2, T = 13;
  std::vector<int32_t> inputs, targets;
  for (int64_t i = 0; i < B * T; ++i) {
    inputs.push_back(static_cast<int32_t>((i * 37 + 5) % cfg.vocab_size));
    targets.push_back(static_cast<int32_t>((i * 53 + 11) % cfg.vocab_size));
  }
  ModelOptions mo;
  mo.max_batch = B;
  mo.max_seq = T;
  Llama model(cfg, mo);
  model.init(3);
  const Forward f32 = forward(model, inputs, targets, B, T);
  Forward bf;
  {
    const MatmulPrecisionGuard bf16(MatmulPrecision::bf16);
    bf = forward(model, inputs, targets, B, T);
  }

  const fs::path dir = fs::path(::testing::TempDir()) / "llama_ref_bf16";
  fs::create_directories(dir);
  save_model_dir((dir / "model").string(), model);
  const int status =
      testing_ref::run_reference(MT_PYTHON_DIR, "llama_reference.py", dir, inputs, targets, B, T, "bf16");
  if (!fs::exists("/usr/bin/python3") || (WIFEXITED(status) && WEXITSTATUS(status) == 3)) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") FAIL() << "torch is missing and CI=true";
    GTEST_SKIP() << "Debian's python3-torch is not installed (scripts/install-deps.sh installs it)";
  }
  ASSERT_EQ(status, 0) << "llama_reference.py bf16 failed in " << dir;

  const double ref_loss = read_f64(dir / "out" / "loss.f64").at(0);
  const std::vector<double> ref_logits = read_f64(dir / "out" / "logits.f64");
  ASSERT_EQ(ref_logits.size(), bf.logits.size());
  const auto n = static_cast<int64_t>(ref_logits.size());
  // bf16's own stated tolerance (docs/MODEL.md "Precision"; issue 23 leaves bf16 out).
  EXPECT_NEAR(bf.loss, ref_loss, 1e-6 * ref_loss);
  EXPECT_LT(rel_l2(bf.logits.data(), ref_logits.data(), n), 1e-5);
  // The fp32 forward is not the bf16 rule.
  EXPECT_GT(std::abs(f32.loss - ref_loss), 1e-5 * ref_loss);
  EXPECT_GT(rel_l2(f32.logits.data(), ref_logits.data(), n), 1e-3);
  std::printf("bf16 loss %.9f reference %.9f fp32 %.9f; logits rel L2 bf16 %.3g fp32 %.3g\n", bf.loss,
              ref_loss, f32.loss, rel_l2(bf.logits.data(), ref_logits.data(), n),
              rel_l2(f32.logits.data(), ref_logits.data(), n));
}

}  // namespace
}  // namespace mt
