#include "core/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace mt {

namespace {

std::string sys_message(int err) {
  return std::system_category().message(err);
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// The lock file's record: "host n1\npid 4242\nstarted 2026-12-01T19:52:01Z\n".
struct Record {
  std::string host, started;
  long pid = -1;
};

std::string record_text(const Record& r) {
  return "host " + r.host + "\npid " + std::to_string(r.pid) + "\nstarted " + r.started + "\n";
}

// The record in the lock file (pid −1 when it is empty or malformed).
Record read_record(int fd) {
  std::string text(4096, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  Record r;
  size_t begin = 0;
  for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    const std::string line = text.substr(begin, end - begin);
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    const std::string key = line.substr(0, sp), value = line.substr(sp + 1);
    if (key == "host") r.host = value;
    if (key == "started") r.started = value;
    if (key == "pid") {
      char* stop = nullptr;
      const long pid = std::strtol(value.c_str(), &stop, 10);
      if (stop != value.c_str() && *stop == '\0') r.pid = pid;
    }
  }
  return r;
}

std::string holder_text(const Record& r) {
  if (r.pid < 0) return "another process (its record is empty)";
  return "pid " + std::to_string(r.pid) + " on host " + r.host + ", started " + r.started;
}

// Without flock: whether the record names a process that still holds the lock.
bool record_alive(const Record& r) {
  if (r.pid <= 0) return false;
  if (r.host != host_name()) return true;  // another host's: cannot tell, so held
  return ::kill(static_cast<pid_t>(r.pid), 0) == 0 || errno == EPERM;
}

}  // namespace

DirLock::DirLock(const std::string& dir) : path_((std::filesystem::path(dir) / ".lock").string()) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  MT_REQUIRE(fd_ >= 0, IoError, "cannot open the lock file '", path_, "': ", sys_message(errno));
  const Record mine{host_name(), utc_now(), static_cast<long>(::getpid())};
  bool held = false;
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      held = true;
    } else if (err != ENOLCK && err != EOPNOTSUPP && err != ENOSYS) {
      ::close(fd_);
      MT_THROW(IoError, "cannot lock '", path_, "': ", sys_message(err));
    } else {
      held = record_alive(read_record(fd_));  // no flock here: the record decides
    }
  }
  if (held) {
    const std::string holder = holder_text(read_record(fd_));
    ::close(fd_);
    MT_THROW(IoError, "directory '", dir, "' is locked by ", holder, " (", path_,
             "): two runs cannot share one train.checkpoint_dir; wait for that run to end or choose another");
  }
  const std::string text = record_text(mine);
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const int err = errno;
    ::close(fd_);
    MT_THROW(IoError, "cannot write the lock file '", path_, "': ", sys_message(err));
  }
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  if (::ftruncate(fd_, 0) != 0) {
    // the record stays; the lock itself goes with the descriptor
  }
  ::close(fd_);
}

}  // namespace mt
