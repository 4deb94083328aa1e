// AtomicDir: a directory is replaced as a whole or not at all, whatever fails
// half way (an injected ENOSPC, an abandoned staging directory, a process that
// died between the two renames of a swap), and no temporary outlives its run.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>

#include "core/atomic_dir.h"
#include "core/error.h"
#include "core/file.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

class Scratch {
 public:
  Scratch() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("mt_adir_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path_, ec);
    set_write_faults({});
  }
  std::string at(const std::string& name) const { return (path_ / name).string(); }
  // Names of the entries of the scratch directory (or of `sub`).
  std::set<std::string> names(const std::string& sub = "") const {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(sub.empty() ? path_ : path_ / sub))
      out.insert(e.path().filename().string());
    return out;
  }

 private:
  fs::path path_;
};

// A pid that is not alive: a child that has exited and been reaped.
long dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

void put(const std::string& path, const std::string& text) {
  write_file_atomic(path, text);
}

TEST(AtomicDir, CommitCreatesTheDirectory) {
  Scratch s;
  AtomicDir d(s.at("m"));
  put(d.staging() + "/a", "1");
  d.commit();
  EXPECT_EQ(read_file(s.at("m/a")), "1");
  EXPECT_EQ(s.names(), std::set<std::string>{"m"});
}

TEST(AtomicDir, CommitReplacesTheWholeDirectory) {
  Scratch s;
  fs::create_directories(s.at("m"));
  put(s.at("m/old"), "old");
  put(s.at("m/shared"), "old");
  AtomicDir d(s.at("m"));
  put(d.staging() + "/shared", "new");
  d.commit();
  EXPECT_EQ(s.names("m"), std::set<std::string>{"shared"});  // no file of the old copy survives
  EXPECT_EQ(read_file(s.at("m/shared")), "new");
  EXPECT_EQ(s.names(), std::set<std::string>{"m"});
}

TEST(AtomicDir, InjectedEnospcLeavesTheOldDirectoryAndNoTemporary) {
  Scratch s;
  fs::create_directories(s.at("m"));
  put(s.at("m/config"), "old config");
  put(s.at("m/weights"), "old weights");
  try {
    AtomicDir d(s.at("m"));
    put(d.staging() + "/config", "new config");  // 10 bytes: within the budget
    set_write_faults({20, 0});
    put(d.staging() + "/weights", std::string(100, 'w'));
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(s.at("m/config")), "old config");
  EXPECT_EQ(read_file(s.at("m/weights")), "old weights");
  EXPECT_EQ(s.names(), std::set<std::string>{"m"});
  EXPECT_EQ(s.names("m"), (std::set<std::string>{"config", "weights"}));
}

TEST(AtomicDir, HalfDoneSwapIsRepairedAtTheNextStart) {
  // A process that renamed the target aside and died before renaming the new
  // copy in: the old copy comes back.
  Scratch s;
  const std::string old = s.at("m.old." + std::to_string(dead_pid()));
  fs::create_directories(old);
  put(old + "/a", "complete");
  repair_dir(s.at("m"));
  EXPECT_EQ(read_file(s.at("m/a")), "complete");
  EXPECT_EQ(s.names(), std::set<std::string>{"m"});
}

TEST(AtomicDir, StaleTemporariesAreRemovedLiveOnesKept) {
  Scratch s;
  fs::create_directories(s.at("m"));
  const std::string pid = std::to_string(dead_pid());
  const std::string live = "m.tmp." + std::to_string(::getpid()) + ".99";
  for (const std::string& n : {"m.tmp." + pid + ".0", "m.old." + pid, live, std::string("m.tmp.x"),
                               std::string("n.tmp." + pid + ".0")})
    fs::create_directories(s.at(n));
  AtomicDir d(s.at("m"));
  std::set<std::string> want = {"m", live, "m.tmp.x", "n.tmp." + pid + ".0",
                                fs::path(d.staging()).filename().string()};
  EXPECT_EQ(s.names(), want);
}

TEST(AtomicDir, RemoveDirWholeGoesThroughTheAsideName) {
  Scratch s;
  fs::create_directories(s.at("step-1/sub"));
  write_file_atomic(s.at("step-1/sub/a"), std::string_view("a"));
  fs::create_directories(s.at("step-2.tmp-removed/x"));  // left by a crash during an earlier removal
  fs::create_directories(s.at("step-2"));
  EXPECT_TRUE(remove_dir_whole(s.at("step-1"), ".tmp-removed"));
  EXPECT_TRUE(remove_dir_whole(s.at("step-2"), ".tmp-removed"));
  EXPECT_TRUE(remove_dir_whole(s.at("step-3"), ".tmp-removed"));  // not there: nothing to do
  EXPECT_EQ(s.names(), std::set<std::string>{});
}

TEST(AtomicDir, TargetThatIsAFileIsRefused) {
  Scratch s;
  put(s.at("m"), "a file");
  AtomicDir d(s.at("m"));
  EXPECT_THROW(d.commit(), IoError);
  EXPECT_EQ(read_file(s.at("m")), "a file");
}

}  // namespace
}  // namespace mt
