// An exclusive lock on a directory for the life of a process (a training run
// on its checkpoint_dir): a second holder is refused by name instead of
// sharing the directory, whose clean-up would then remove the first's
// in-flight files.
//
// The lock is an flock(2) on "<dir>/.lock". The kernel drops it when the
// holder's descriptor closes, so it goes on any exit (an error, a signal,
// SIGKILL): a lock file left by a dead process is not held, and the next run
// takes it. The file records the holder (host, pid, start time) for the
// refusal. On a file system without flock (ENOLCK, EOPNOTSUPP) the record
// alone decides: a record of a live process on this host is held, one of a
// dead pid is stale and replaced; a record of another host counts as held.
#pragma once

#include <string>

namespace mt {

class DirLock {
 public:
  // Takes the lock on `dir` (which must exist); IoError naming the holder
  // ("… is locked by pid 4242 on host n1, started 2026-12-01T19:52:01Z") when
  // another holds it, or the path and the system's message when it cannot.
  explicit DirLock(const std::string& dir);
  // Clears the record and releases the lock.
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace mt
