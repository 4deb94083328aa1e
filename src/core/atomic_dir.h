// Replacing a directory as a whole: readers see either the old directory or
// the complete new one, never a mix (e.g. a config.json that describes one
// model beside weights of another).
//
// The files go to a staging directory beside the target ("<dir>.tmp.<pid>.<n>",
// on the same file system), each written with AtomicFile (so flushed to disk).
// commit() flushes the staging directory, then swaps it in:
//   - no target yet: one rename;
//   - a target: renameat2(RENAME_EXCHANGE) swaps the two in one step, and the
//     old copy (now under the staging name) is deleted;
//   - a file system without RENAME_EXCHANGE: the target is renamed aside to
//     "<dir>.old.<pid>", the staging directory renamed in, the old copy deleted.
//     A crash between the two renames leaves no "<dir>"; the next AtomicDir on
//     the same path (or repair_dir()) renames the old copy back.
// Temporaries of processes that no longer run ("<dir>.tmp.*", "<dir>.old.*"
// whose pid is not alive on this machine) are removed at the next start.
#pragma once

#include <string>

namespace mt {

class AtomicDir {
 public:
  // Repairs a half-done swap of `dir`, removes stale temporaries and creates a
  // fresh staging directory (its parent must exist or be creatable). IoError
  // naming the path on failure.
  explicit AtomicDir(std::string dir);
  // Removes the staging directory unless commit() succeeded.
  ~AtomicDir();
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  // Where to write the new directory's files.
  const std::string& staging() const { return staging_; }
  // Flushes and swaps the staging directory in (see above); IoError on failure,
  // the target then as it was.
  void commit();

 private:
  std::string dir_;
  std::string staging_;
  bool committed_ = false;
};

// Start-up check that `dir` can later be replaced by an AtomicDir: its parent
// exists or can be created and is writable, and `dir` is a directory if it
// exists. IoError naming the path and the system's message otherwise. Leaves
// nothing behind but the parent directories it created.
void check_dir_writable(const std::string& dir);

// Start-up check of an output FILE (--trace, --metrics, prepare's and
// calibrate's outputs), so that a path that cannot be written fails before the
// work rather than after it: `path` is not a directory, and the temporary file
// an AtomicFile (core/file.h) writes beside it can be created (it is removed
// again). IoError "<what> '<path>': <the reason>" otherwise.
void check_file_writable(const std::string& path, const std::string& what);

// fsync of a directory (its entries: files created, renamed or removed in
// it). IoError naming the path on an I/O error; a file system that cannot
// flush directories (EINVAL) is not an error.
void flush_directory(const std::string& dir);

// Renames the complete directory `from` to `to` (which must not exist) in one
// step and flushes their parent, so that after a crash either `to` is whole or
// it does not exist. For directories several processes fill together (the
// checkpoints of ckpt/checkpoint.h), which AtomicDir's per-process staging
// cannot serve. IoError naming both paths on failure.
void publish_dir(const std::string& from, const std::string& to);

// Removes the directory `dir` (if there) so that a reader never sees part of
// it: it is renamed to `dir + aside_suffix` in one step, the parent flushed,
// and then deleted, so a crash mid-way leaves `dir` whole or gone (and maybe
// the aside copy, which the caller's naming rule must treat as a leftover).
// An aside copy left by an earlier crash is deleted first. Returns false, and
// leaves `dir` as it was, when `dir` exists but cannot be renamed.
bool remove_dir_whole(const std::string& dir, const std::string& aside_suffix);

// Finishes or undoes a swap of `dir` that a crashed process left half done, and
// removes temporaries of processes that no longer run. Never throws for a
// temporary it cannot remove (another run may hold it).
void repair_dir(const std::string& dir);

}  // namespace mt
