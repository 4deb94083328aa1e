#include "data/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace mt {

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_REQUIRE(fd >= 0, IoError, "cannot open ", path, ": ", std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      MT_THROW(IoError, "cannot read ", path, ": ", std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void write_file_atomic(const std::string& path, const void* data, int64_t bytes) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  MT_REQUIRE(fd >= 0, IoError, "cannot create a temporary file beside ", path, ": ", std::strerror(errno));
  const auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    MT_THROW(IoError, "cannot ", what, " ", tmp, " (for ", path, "): ", std::strerror(err));
  };
  const auto* p = static_cast<const char*>(data);
  int64_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, static_cast<size_t>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write");
    p += n;
    left -= n;
  }
  if (::fchmod(fd, 0644) != 0) fail("chmod");
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    MT_THROW(IoError, "cannot close ", tmp, " (for ", path, "): ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    MT_THROW(IoError, "cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
}

}  // namespace mt
