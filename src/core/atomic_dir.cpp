#include "core/atomic_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "core/fault_point.h"
#include "core/file.h"

namespace mt {

namespace fs = std::filesystem;

namespace {

std::string sys_message(int err) {
  return std::system_category().message(err);
}

// The pid in "<dir><marker><pid>[.<n>]", or -1 when `name` is not such a temporary.
long temporary_pid(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string rest = name.substr(prefix.size());
  size_t used = 0;
  long pid = -1;
  try {
    pid = std::stol(rest, &used);
  } catch (const std::exception&) {
    return -1;
  }
  if (used == 0 || (used < rest.size() && rest[used] != '.')) return -1;
  return pid;
}

bool process_alive(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

fs::path parent_of(const std::string& dir) {
  fs::path p = fs::path(dir).parent_path();
  return p.empty() ? fs::path(".") : p;
}

}  // namespace

// Some file systems cannot flush a directory (EINVAL), which is not a failure
// of the data, so only real I/O errors count.
void flush_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err == EIO) MT_THROW(IoError, "cannot flush directory '", dir, "': ", sys_message(err));
}

void publish_dir(const std::string& from, const std::string& to) {
  kill_point("dir_fsync_before");
  flush_directory(from);
  kill_point("dir_fsync_after");
  std::error_code ec;
  MT_REQUIRE(!fs::exists(to, ec), IoError, "cannot rename '", from, "' to '", to, "': the target exists");
  kill_point("rename_before");
  if (::rename(from.c_str(), to.c_str()) != 0)
    MT_THROW(IoError, "cannot rename '", from, "' to '", to, "': ", sys_message(errno));
  flush_directory(parent_of(to).string());
}

bool remove_dir_whole(const std::string& dir, const std::string& aside_suffix) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return true;
  const std::string aside = dir + aside_suffix;
  fs::remove_all(aside, ec);
  if (::rename(dir.c_str(), aside.c_str()) != 0) return false;
  try {
    flush_directory(parent_of(dir).string());
  } catch (const IoError&) {
    // the rename is done; only its durability is in doubt, and a reader sees `dir` whole or not at all
  }
  fs::remove_all(aside, ec);  // what a crash leaves of it is the caller's leftover to remove later
  return true;
}

void repair_dir(const std::string& dir) {
  const fs::path target(dir);
  const std::string base = target.filename().string();
  std::error_code ec;
  std::vector<fs::path> old_copies, stale;
  for (const auto& e : fs::directory_iterator(parent_of(dir), ec)) {
    const std::string name = e.path().filename().string();
    const long old_pid = temporary_pid(name, base + ".old.");
    const long tmp_pid = temporary_pid(name, base + ".tmp.");
    if (old_pid > 0 && !process_alive(old_pid)) old_copies.push_back(e.path());
    if (tmp_pid > 0 && !process_alive(tmp_pid)) stale.push_back(e.path());
  }
  // The first rename of a two-rename swap happened and the second did not: the
  // old copy is the last complete directory, so it goes back.
  if (!fs::exists(target, ec) && !old_copies.empty()) {
    if (::rename(old_copies.front().c_str(), target.c_str()) == 0) old_copies.erase(old_copies.begin());
  }
  for (const fs::path& p : old_copies)
    fs::remove_all(p, ec);
  for (const fs::path& p : stale)
    fs::remove_all(p, ec);
}

AtomicDir::AtomicDir(std::string dir) : dir_(std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/')
    dir_.pop_back();
  std::error_code ec;
  fs::create_directories(parent_of(dir_), ec);
  MT_REQUIRE(!ec, IoError, "cannot create directory '", parent_of(dir_).string(), "' (for '", dir_,
             "'): ", ec.message());
  repair_dir(dir_);
  static std::atomic<uint64_t> counter{0};
  staging_ = dir_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  if (::mkdir(staging_.c_str(), 0755) != 0) {
    MT_THROW(IoError, "cannot create '", staging_, "' (staging directory for '", dir_,
             "'): ", sys_message(errno));
  }
}

AtomicDir::~AtomicDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void AtomicDir::commit() {
  MT_REQUIRE(!committed_, IoError, "commit of '", dir_, "' twice");
  flush_directory(staging_);
  const fs::path parent = parent_of(dir_);
  std::error_code ec;
  const bool existed = fs::exists(dir_, ec);
  MT_REQUIRE(!existed || fs::is_directory(dir_, ec), IoError, "cannot replace '", dir_,
             "': it exists and is not a directory");
  if (!existed) {
    if (::rename(staging_.c_str(), dir_.c_str()) != 0)
      MT_THROW(IoError, "cannot rename '", staging_, "' to '", dir_, "': ", sys_message(errno));
  } else if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(staging_, ec);  // the old copy, now under the staging name
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    const std::string old = dir_ + ".old." + std::to_string(::getpid());
    if (::rename(dir_.c_str(), old.c_str()) != 0)
      MT_THROW(IoError, "cannot rename '", dir_, "' to '", old, "': ", sys_message(errno));
    if (::rename(staging_.c_str(), dir_.c_str()) != 0) {
      const int err = errno;
      ::rename(old.c_str(), dir_.c_str());  // put the old one back
      MT_THROW(IoError, "cannot rename '", staging_, "' to '", dir_, "': ", sys_message(err));
    }
    fs::remove_all(old, ec);
  } else {
    MT_THROW(IoError, "cannot swap '", staging_, "' with '", dir_, "': ", sys_message(errno));
  }
  committed_ = true;
  flush_directory(parent);
}

}  // namespace mt

namespace mt {

void check_dir_writable(const std::string& dir) {
  std::error_code ec;
  MT_REQUIRE(!fs::exists(dir, ec) || fs::is_directory(dir, ec), IoError, "cannot write model directory '",
             dir, "': it exists and is not a directory");
  AtomicDir probe(dir);  // creates, then (uncommitted) removes, a staging directory beside it
}

void check_file_writable(const std::string& path, const std::string& what) {
  std::error_code ec;
  MT_REQUIRE(!fs::is_directory(path, ec), IoError, what, " '", path, "': it is a directory, not a file");
  try {
    const AtomicFile probe(path);  // its destructor removes the uncommitted temporary
  } catch (const IoError& e) {
    MT_THROW(IoError, what, " '", path, "' cannot be written: ", e.what());
  }
}

}  // namespace mt
