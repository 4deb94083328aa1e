// read_file, write_file_atomic and AtomicFile: round trips, no temporary file
// left behind on success, failure or abandonment, and IoErrors that name the
// path and the system's message.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "core/error.h"
#include "core/file.h"

namespace mt {
namespace {

// A fresh directory named after the running test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("mt_core_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  int count() const {
    int n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(path_))
      ++n;
    return n;
  }

 private:
  std::filesystem::path path_;
};

// Runs f, expects an IoError, and returns its message.
template <typename F>
std::string io_error_message(F&& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected IoError";
  return {};
}

TEST(File, WriteThenReadRoundTripsBinaryBytes) {
  TempDir dir;
  const std::string path = dir.file("a.bin");
  const std::string bytes("x\0y\xff\n", 5);
  write_file_atomic(path, bytes.data(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(read_file(path), bytes);
  write_file_atomic(path, std::string_view("replaced"));
  EXPECT_EQ(read_file(path), "replaced");
  write_file_atomic(path, std::string_view());
  EXPECT_EQ(read_file(path), "");
  EXPECT_EQ(dir.count(), 1);  // no temporary file left beside it
}

TEST(File, ReadsFilesLargerThanOneBuffer) {
  TempDir dir;
  const std::string path = dir.file("big");
  std::string bytes(300000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i * 131 % 251);
  write_file_atomic(path, bytes);
  EXPECT_EQ(read_file(path), bytes);
}

TEST(File, AtomicFileCommitsStreamedWrites) {
  TempDir dir;
  const std::string path = dir.file("s.txt");
  {
    AtomicFile f(path);
    f.write("abc", 3);
    f.write("def", 3);
    EXPECT_FALSE(std::filesystem::exists(path));  // nothing visible before commit
    f.commit();
  }
  EXPECT_EQ(read_file(path), "abcdef");
  EXPECT_EQ(dir.count(), 1);
}

TEST(File, AbandonedAtomicFileLeavesTargetUntouched) {
  TempDir dir;
  const std::string path = dir.file("keep.txt");
  write_file_atomic(path, std::string_view("old"));
  {
    AtomicFile f(path);
    f.write("new", 3);
  }  // destroyed without commit
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(dir.count(), 1);
}

TEST(File, UseAfterCommitIsIoError) {
  TempDir dir;
  const std::string path = dir.file("once");
  AtomicFile f(path);
  f.commit();
  EXPECT_NE(io_error_message([&] { f.write("x", 1); }).find(path), std::string::npos);
  EXPECT_NE(io_error_message([&] { f.commit(); }).find(path), std::string::npos);
}

TEST(File, MissingFileIsIoErrorNamingPathAndReason) {
  TempDir dir;
  const std::string path = dir.file("nope");
  const std::string msg = io_error_message([&] { read_file(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
}

// Every file meshtrain reads is opened by open_regular_file: a device, a FIFO
// or a directory is refused at once (never read until memory runs out, never
// waited on), naming the path and what it is; so is a file over its kind's cap.
TEST(File, NonRegularFilesAreRefusedNamingTheirKind) {
  TempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string sub = dir.file("sub");
  std::filesystem::create_directories(sub);
  const std::string link = dir.file("zero-link");
  std::filesystem::create_symlink("/dev/zero", link);
  const struct {
    std::string path, kind;
  } cases[] = {{fifo, "a FIFO"},
               {sub, "a directory"},
               {link, "a character device"},
               {"/dev/urandom", "a character device"}};
  for (const auto& c : cases) {
    const std::string msg = io_error_message([&] { read_file(c.path, 1 << 20, "config file"); });
    EXPECT_NE(msg.find("config file '" + c.path + "' is not a regular file (" + c.kind + ")"),
              std::string::npos)
        << msg;
    const std::string size_msg =
        io_error_message([&] { regular_file_size(c.path, 1 << 20, "tokenizer model"); });
    EXPECT_NE(size_msg.find("tokenizer model '" + c.path + "'"), std::string::npos) << size_msg;
  }
}

TEST(File, FileOverItsCapIsRefusedNamingSizeAndCap) {
  TempDir dir;
  const std::string path = dir.file("big");
  write_file_atomic(path, std::string(5000, 'x'));
  EXPECT_EQ(read_file(path, 5000, "latest file").size(), 5000u);
  const std::string msg = io_error_message([&] { read_file(path, 4096, "latest file"); });
  EXPECT_NE(msg.find("latest file '" + path + "' has 5000 bytes, more than the 4 KiB"), std::string::npos)
      << msg;
  EXPECT_EQ(regular_file_size(path, 5000, "x"), 5000);
  EXPECT_EQ(read_file("/dev/null", 10, "config file"), "");  // "--config /dev/null": no config
}

TEST(File, WriteIntoMissingDirectoryIsIoError) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/x");
  const std::string msg = io_error_message([&] { write_file_atomic(path, std::string_view("x")); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
}

TEST(File, MakeDirectoriesCreatesParentsOrNamesThePath) {
  TempDir dir;
  make_directories(dir.file("a/b/c"));
  make_directories(dir.file("a/b/c"));  // already there: nothing to do
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("a/b/c")));
  write_file_atomic(dir.file("f"), std::string_view("a file"));
  const std::string path = dir.file("f/sub");
  const std::string msg = io_error_message([&] { make_directories(path); });
  EXPECT_NE(msg.find("cannot create directory '" + path + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Not a directory"), std::string::npos) << msg;
}

TEST(File, FailedRenameRemovesTemporaryFile) {
  TempDir dir;
  const std::string path = dir.file("taken");
  std::filesystem::create_directory(path);  // renaming a file over a directory fails
  const std::string msg = io_error_message([&] { write_file_atomic(path, std::string_view("x")); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_EQ(dir.count(), 1);
  EXPECT_TRUE(std::filesystem::is_directory(path));
}

}  // namespace
}  // namespace mt
