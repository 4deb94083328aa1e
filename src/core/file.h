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

// Size caps of the files meshtrain reads, by kind (open_regular_file's
// max_bytes): each far above any real file of its kind, so that only a wrong
// file (a device, a log in the wrong place) meets one.
inline constexpr int64_t kMaxPointerFile = 4 << 10;          // a checkpoint's `latest`
inline constexpr int64_t kMaxConfigFile = 64 << 20;          // TOML configs, config.json, machine files
inline constexpr int64_t kMaxMetadataFile = 1LL << 30;       // metadata.json (an entry per slice)
inline constexpr int64_t kMaxTextFile = 16LL << 30;          // prompts, metrics, corpora, tokenizer models
inline constexpr int64_t kMaxMappedFile = int64_t{1} << 50;  // shards and token files (mapped, not read)

// Opens `path` (symlinks followed) for reading if it is a regular file of at
// most `max_bytes` bytes, and returns the descriptor (the caller closes it)
// and, in `*bytes`, the size. IoError naming `what` ("config file"), the path
// and the rule otherwise: "config file '/dev/zero' is not a regular file (a
// character device)". Opened non-blocking, so that a FIFO is refused rather
// than waited on. /dev/null passes, as an empty file. The one check of every
// file meshtrain reads.
int open_regular_file(const std::string& path, int64_t max_bytes, std::string_view what, int64_t* bytes);

// open_regular_file's checks alone (for a file another library opens): its size.
int64_t regular_file_size(const std::string& path, int64_t max_bytes, std::string_view what);

// Whole file as bytes, after open_regular_file's checks.
std::string read_file(const std::string& path, int64_t max_bytes = kMaxMappedFile,
                      std::string_view what = "file");

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
