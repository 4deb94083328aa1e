// Helpers for the data tests: a fresh folder per test and error matchers.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace mt::testing_data {

// A new empty folder under the gtest temp dir, named after the running test.
inline std::filesystem::path fresh_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "mt_data_tests" /
                                    (std::string(info->test_suite_name()) + "." + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

}  // namespace mt::testing_data

// Expects `stmt` to throw `Type` whose message contains every one of the
// given substrings.
#define EXPECT_THROW_WITH(stmt, Type, ...)                                                  \
  do {                                                                                      \
    try {                                                                                   \
      stmt;                                                                                 \
      ADD_FAILURE() << #stmt " did not throw";                                              \
    } catch (const Type& e) {                                                               \
      const std::string msg = e.what();                                                     \
      for (const std::string& part : std::initializer_list<std::string>{__VA_ARGS__}) {     \
        EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg; \
      }                                                                                     \
    }                                                                                       \
  } while (0)
