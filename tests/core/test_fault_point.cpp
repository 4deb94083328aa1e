// Kill points (core/fault_point.h): an armed point ends the process with
// SIGKILL exactly there, leaving on disk what was written up to that moment;
// an unarmed point does nothing; kill_bytes cuts a file after the armed number
// of bytes. Each kill runs in a forked child (a death test) that arms it.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/atomic_dir.h"
#include "core/error.h"
#include "core/fault_point.h"
#include "core/file.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

// A fresh directory for one test, removed afterwards. Created before the
// death test forks, so the child writes where the parent then looks.
class KillDir {
 public:
  KillDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("mt_kill_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~KillDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  KillDir(const KillDir&) = delete;
  KillDir& operator=(const KillDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Every entry's name, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path path_;
};

TEST(KillPointDeathTest, KillBytesCutsTheFileAtThatByte) {
  GTEST_FLAG_SET(death_test_style, "fast");  // fork: the child sees KillDir's path
  KillDir dir;
  const std::string path = dir.file("shard");
  EXPECT_EXIT(
      {
        arm_kill_after_bytes(7);
        AtomicFile f(path);
        f.write("abcde", 5);
        f.write("fghij", 5);  // dies after "fg"
        f.commit();
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "kill_bytes");
  // The target was never renamed in; its temporary holds exactly 7 bytes.
  const std::vector<std::string> names = dir.names();
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].rfind("shard.tmp.", 0), 0u) << names[0];
  EXPECT_EQ(read_file(dir.file(names[0])), "abcdefg");
}

TEST(KillPointDeathTest, KillBytesZeroDiesBeforeTheFirstByte) {
  GTEST_FLAG_SET(death_test_style, "fast");
  KillDir dir;
  const std::string path = dir.file("shard");
  EXPECT_EXIT(
      {
        arm_kill_after_bytes(0);
        write_file_atomic(path, std::string_view("hello"));
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "kill_bytes");
  const std::vector<std::string> names = dir.names();
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(read_file(dir.file(names[0])), "");
}

TEST(KillPointDeathTest, FileFsyncPointsLeaveTheTargetUntouched) {
  GTEST_FLAG_SET(death_test_style, "fast");
  for (const char* point : {"file_fsync_before", "file_fsync_after"}) {
    KillDir dir;
    const std::string path = dir.file("latest");
    write_file_atomic(path, std::string_view("old\n"));
    EXPECT_EXIT(
        {
          arm_kill_point(point);
          write_file_atomic(path, std::string_view("new\n"));
          std::exit(0);
        },
        ::testing::KilledBySignal(SIGKILL), std::string("at kill point ") + point);
    EXPECT_EQ(read_file(path), "old\n") << point;
    ASSERT_EQ(dir.names().size(), 2u) << point;  // the target and the complete temporary
    EXPECT_EQ(read_file(dir.file(dir.names()[1])), "new\n") << point;
  }
}

TEST(KillPointDeathTest, PublishDirPointsComeBeforeTheRename) {
  GTEST_FLAG_SET(death_test_style, "fast");
  for (const char* point : {"dir_fsync_before", "dir_fsync_after", "rename_before"}) {
    KillDir dir;
    fs::create_directories(dir.file("step-1.tmp-9"));
    write_file_atomic(dir.file("step-1.tmp-9/a"), std::string_view("a"));
    EXPECT_EXIT(
        {
          arm_kill_point(point);
          publish_dir(dir.file("step-1.tmp-9"), dir.file("step-1"));
          std::exit(0);
        },
        ::testing::KilledBySignal(SIGKILL), std::string("at kill point ") + point);
    EXPECT_EQ(dir.names(), std::vector<std::string>{"step-1.tmp-9"}) << point;
  }
}

TEST(KillPoint, UnarmedPointsDoNothingAndUnknownOnesAreABug) {
  KillDir dir;
  for (const char* point : kKillPoints)
    kill_point(point);  // nothing is armed in this process
  write_file_atomic(dir.file("f"), std::string_view("all of it"));
  EXPECT_EQ(read_file(dir.file("f")), "all of it");
  EXPECT_THROW(kill_point("file_fsync"), Error);
  EXPECT_TRUE(is_kill_point("rename_before"));
  EXPECT_FALSE(is_kill_point("rename"));
  EXPECT_NE(kill_point_list().find("prune_before"), std::string::npos);
}

}  // namespace
}  // namespace mt
