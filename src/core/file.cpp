#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <thread>
#include <utility>

#include "core/atomic_dir.h"
#include "core/error.h"
#include "core/fault_point.h"

namespace mt {
namespace {

// The text of strerror(err), without strerror's shared buffer.
std::string sys_message(int err) {
  return std::system_category().message(err);
}

// Unique within this process (counter) and across processes (pid).
std::string temporary_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

// The injected faults (set_write_faults); relaxed atomics, since only the
// tests set them and a write only needs to see some recent value.
std::atomic<int64_t> g_enospc_after{-1};
std::atomic<double> g_commit_delay_s{0};

// Charges `bytes` to the injected ENOSPC budget; false when it is spent.
bool write_fault_allows(size_t bytes) {
  int64_t left = g_enospc_after.load(std::memory_order_relaxed);
  if (left < 0) return true;
  const int64_t after = left - static_cast<int64_t>(bytes);
  g_enospc_after.store(after < 0 ? 0 : after, std::memory_order_relaxed);
  return after >= 0;
}

}  // namespace

void set_write_faults(const WriteFaults& f) {
  g_enospc_after.store(f.enospc_after, std::memory_order_relaxed);
  g_commit_delay_s.store(f.commit_delay_s, std::memory_order_relaxed);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_path_(temporary_name(path_)) {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    MT_THROW(IoError, "cannot create '", tmp_path_, "' (temporary file for '", path_,
             "'): ", sys_message(errno));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  MT_REQUIRE(fd_ >= 0, IoError, "write to '", path_, "' after it was committed or failed");
  if (!write_fault_allows(bytes)) {
    MT_THROW(IoError, "cannot write '", tmp_path_, "' (for '", path_, "'): ", sys_message(ENOSPC),
             " (injected by MESHTRAIN_FAULT)");
  }
  const char* p = static_cast<const char*>(data);
  const size_t before_kill = bytes_before_kill(bytes);  // MESHTRAIN_FAULT kill_bytes: a file cut short
  write_all(p, before_kill);
  kill_if_bytes_spent();
  write_all(p + before_kill, bytes - before_kill);
}

void AtomicFile::write_all(const char* p, size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) MT_THROW(IoError, "cannot write '", tmp_path_, "' (for '", path_, "'): ", sys_message(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  MT_REQUIRE(fd_ >= 0, IoError, "commit of '", path_, "' after it was committed or failed");
  const double delay = g_commit_delay_s.load(std::memory_order_relaxed);
  if (delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
  kill_point("file_fsync_before");
  if (::fsync(fd_) != 0) MT_THROW(IoError, "cannot flush '", tmp_path_, "' to disk: ", sys_message(errno));
  kill_point("file_fsync_after");
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) MT_THROW(IoError, "cannot close '", tmp_path_, "': ", sys_message(errno));
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    MT_THROW(IoError, "cannot rename '", tmp_path_, "' to '", path_, "': ", sys_message(errno));
  }
  committed_ = true;
  // Make the rename itself durable (only real I/O errors count: flush_directory).
  std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  flush_directory(dir.empty() ? std::string(".") : dir.string());
}

void write_file_atomic(const std::string& path, const void* data, int64_t bytes) {
  MT_CHECK(bytes >= 0, "negative size ", bytes, " for ", path);
  AtomicFile file(path);
  file.write(data, static_cast<size_t>(bytes));
  file.commit();
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  write_file_atomic(path, contents.data(), static_cast<int64_t>(contents.size()));
}

namespace {

// "a directory", "a FIFO", ... for open_regular_file's refusal.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

// /dev/null reads as an empty file ("--config /dev/null": no config file).
bool is_dev_null(const struct stat& st) {
  struct stat null {};
  return S_ISCHR(st.st_mode) && ::stat("/dev/null", &null) == 0 && st.st_rdev == null.st_rdev;
}

std::string bytes_text(int64_t n) {
  if (n >= (1LL << 30) && n % (1LL << 30) == 0) return std::to_string(n >> 30) + " GiB";
  if (n >= (1LL << 20) && n % (1LL << 20) == 0) return std::to_string(n >> 20) + " MiB";
  if (n >= (1LL << 10) && n % (1LL << 10) == 0) return std::to_string(n >> 10) + " KiB";
  return std::to_string(n) + " bytes";
}

}  // namespace

int open_regular_file(const std::string& path, int64_t max_bytes, std::string_view what, int64_t* bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  MT_REQUIRE(fd >= 0, IoError, "cannot open ", what, " '", path, "': ", sys_message(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    MT_THROW(IoError, "cannot stat ", what, " '", path, "': ", sys_message(err));
  }
  if (!S_ISREG(st.st_mode) && !is_dev_null(st)) {
    ::close(fd);
    MT_THROW(IoError, what, " '", path, "' is not a regular file (", file_kind(st.st_mode), ")");
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    MT_THROW(IoError, what, " '", path, "' has ", st.st_size, " bytes, more than the ", bytes_text(max_bytes),
             " a ", what, " may have");
  }
  // Reads of a regular file never block; clear the flag for those who map or read it.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *bytes = S_ISREG(st.st_mode) ? st.st_size : 0;
  return fd;
}

int64_t regular_file_size(const std::string& path, int64_t max_bytes, std::string_view what) {
  int64_t bytes = 0;
  ::close(open_regular_file(path, max_bytes, what, &bytes));
  return bytes;
}

std::string read_file(const std::string& path, int64_t max_bytes, std::string_view what) {
  int64_t bytes = 0;
  const int fd = open_regular_file(path, max_bytes, what, &bytes);
  // Read straight into a buffer of the file's size (a checkpoint shard is
  // hundreds of MB); grown if the file grows meanwhile (up to the cap),
  // trimmed at end of file.
  std::string out(static_cast<size_t>(bytes) + 1, '\0');
  size_t size = 0;
  for (;;) {
    if (size == out.size()) {
      if (static_cast<int64_t>(size) > max_bytes) {
        ::close(fd);
        MT_THROW(IoError, what, " '", path, "' grew past the ", bytes_text(max_bytes), " a ", what,
                 " may have while it was read");
      }
      out.resize(out.size() * 2);
    }
    const ssize_t n = ::read(fd, out.data() + size, out.size() - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      MT_THROW(IoError, "cannot read ", what, " '", path, "': ", sys_message(err));
    }
    if (n == 0) break;
    size += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(size);
  return out;
}

void make_directories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) MT_THROW(IoError, "cannot create directory '", dir, "': ", ec.message());
}

}  // namespace mt
