// Seeded values at the start-up checks a run makes before its first step
// (issue 24): a val.bin written for a seeded vocabulary beside a good
// train.bin is refused exactly when the run would evaluate on it and its
// vocabulary exceeds the model's; a seeded thread count is refused exactly
// when it is negative or above 4 x the machine's cores. The expectation is the
// rule restated here, not the code's answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "core/threads.h"
#include "data/token_file.h"
#include "fuzz/mutate.h"
#include "train/trainer.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

TEST(Fuzz, ValidationTokensOutsideTheVocabulary) {
  const fs::path dir = fs::path(fuzz::scratch("fuzzstart", "x")).parent_path();
  Config cfg;
  cfg.data.dir = dir.string();
  cfg.model.vocab_size = 300;
  std::vector<int32_t> train(64);
  for (size_t i = 0; i < train.size(); ++i)
    train[i] = static_cast<int32_t>(i * 7 % 300);
  write_token_file((dir / "train.bin").string(), train, 300);
  std::mt19937_64 rng(fuzz::seed() + 10);
  const int n = fuzz::iterations(150);
  int refused = 0, accepted = 0;
  for (int it = 0; it < n; ++it) {
    // The val.bin's vocabulary: near the model's, far above it (16- and 32-bit ids), or absent.
    const int pick = static_cast<int>(rng() % 5);
    const int64_t vocab = pick == 0   ? 1 + static_cast<int64_t>(rng() % 300)
                          : pick == 1 ? 290 + static_cast<int64_t>(rng() % 20)
                          : pick == 2 ? 301 + static_cast<int64_t>(rng() % 70000)
                          : pick == 3 ? 0x7fffffff - static_cast<int64_t>(rng() % 3)
                                      : 0;  // no val.bin
    fs::remove(dir / "val.bin");
    if (vocab > 0) {
      std::vector<int32_t> val(16);
      for (int32_t& t : val)
        t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
      val[0] = static_cast<int32_t>(vocab - 1);  // the highest id the file may hold
      write_token_file((dir / "val.bin").string(), val, vocab);
    }
    cfg.train.eval_every = static_cast<int64_t>(rng() % 3);  // 0: the run never reads val.bin
    const bool want_refused = cfg.train.eval_every > 0 && vocab > cfg.model.vocab_size;
    try {
      check_training_data(cfg);
      EXPECT_FALSE(want_refused) << "iteration " << it << ": val.bin of vocabulary " << vocab << " accepted";
      ++accepted;
    } catch (const ConfigError& e) {
      EXPECT_TRUE(want_refused) << "iteration " << it << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("val.bin was written for a " + std::to_string(vocab) +
                                           "-token vocabulary but model.vocab_size is 300"),
                std::string::npos)
          << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);
  std::printf("val.bin vocabularies: %d cases, %d refused, %d accepted\n", n, refused, accepted);
  fs::remove_all(dir);
}

TEST(Fuzz, ThreadCounts) {
  const int64_t bound = 4 * static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  std::mt19937_64 rng(fuzz::seed() + 11);
  const int n = fuzz::iterations(300);
  int refused = 0, accepted = 0;
  for (int it = 0; it < n; ++it) {
    const int pick = static_cast<int>(rng() % 4);
    const int64_t v = pick == 0   ? bound - 3 + static_cast<int64_t>(rng() % 7)  // around the bound
                      : pick == 1 ? -3 + static_cast<int64_t>(rng() % 7)         // around 0
                      : pick == 2 ? static_cast<int64_t>(rng() >> (rng() % 64))  // any size
                                  : -static_cast<int64_t>(rng() >> (1 + rng() % 63));
    const bool want_refused = v < 0 || v > bound;
    try {
      check_thread_count("train.threads", v);
      EXPECT_FALSE(want_refused) << v << " accepted";
      ++accepted;
    } catch (const ConfigError& e) {
      EXPECT_TRUE(want_refused) << v << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("train.threads (" + std::to_string(v) + ")"), std::string::npos);
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);
  std::printf("thread counts: %d cases, %d refused, %d accepted\n", n, refused, accepted);
}

}  // namespace
}  // namespace mt
