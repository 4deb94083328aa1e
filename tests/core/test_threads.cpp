// The bound on thread counts (train.threads, eval's and generate's --threads):
// 0 through 4 x the machine's cores accepted, anything else refused naming the value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/threads.h"

namespace mt {
namespace {

using ::testing::HasSubstr;

TEST(ThreadCount, BoundIsFourTimesTheCores) {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_EQ(max_threads(), 4 * cores);
  check_thread_count("train.threads", 0);
  check_thread_count("train.threads", 1);
  check_thread_count("train.threads", 4 * cores);
  for (const int64_t bad : {int64_t{-1}, 4 * cores + 1, int64_t{65536}, int64_t{1} << 40}) {
    try {
      check_thread_count("--threads", bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("--threads (" + std::to_string(bad) + ") must be between 0"));
      EXPECT_THAT(e.what(), HasSubstr("and " + std::to_string(4 * cores) + " ("));
    }
  }
}

}  // namespace
}  // namespace mt
