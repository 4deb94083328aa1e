// Whole-file reads and atomic file replacement. Every failure is an IoError
// naming the path and the system's message.
//
// Atomic replacement: readers see either the old contents of `path` or the
// complete new ones, never a half-written file. The bytes go to a temporary
// file in the same directory (rename is atomic only within one file system),
// which is flushed to disk and then renamed over the target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mt {

class AtomicFile {
 public:
  // Creates the temporary file beside `path` (mode 0644 less the umask);
  // IoError if it cannot.
  explicit AtomicFile(std::string path);
  // Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends `bytes` bytes; IoError naming the path and the system's message.
  void write(const void* data, size_t bytes);
  // fsync, close and rename over the target, then fsync the directory; IoError
  // on failure (the target is then left as it was).
  void commit();

 private:
  void write_all(const char* p, size_t bytes);  // write(2) until done; IoError naming the path

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Replaces `path` with `bytes` bytes from `data` (bytes ≥ 0) atomically.
void write_file_atomic(const std::string& path, const void* data, int64_t bytes);

// Replaces `path` with `contents` atomically.
void write_file_atomic(const std::string& path, std::string_view contents);

// Whole file as bytes.
std::string read_file(const std::string& path);

// Creates the directory `dir` and its missing parents (nothing when it
// exists); IoError naming the path and the system's message otherwise.
void make_directories(const std::string& dir);

// Fault injection for the failure tests (MESHTRAIN_FAULT kinds enospc and
// slow_io): from this call on, AtomicFile writes of this process fail with
// ENOSPC, as on a full disk, once `enospc_after` more bytes have been written
// (negative: never), and each commit first sleeps `commit_delay_s` seconds.
struct WriteFaults {
  int64_t enospc_after = -1;
  double commit_delay_s = 0;
};
void set_write_faults(const WriteFaults& f);

}  // namespace mt
