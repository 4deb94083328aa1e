#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/file.h"

namespace mt {

// Token ids are read straight out of the mapping.
static_assert(std::endian::native == std::endian::little, "token files are little-endian");

namespace {

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t dtype;
  uint32_t vocab_size;
  uint32_t reserved;
  uint64_t count;
};
static_assert(sizeof(Header) == kTokenFileHeaderBytes);

// Ids are handed out as int32_t.
constexpr int64_t kMaxVocab = 0x7fffffff;

std::string printable(const char* bytes, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      s += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      s += "\\x";
      s += hex[c >> 4];
      s += hex[c & 15];
    }
  }
  return s;
}

}  // namespace

int64_t token_dtype_size(TokenDType dtype) {
  return dtype == TokenDType::u16 ? 2 : 4;
}

TokenDType token_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? TokenDType::u16 : TokenDType::u32;
}

void write_token_file(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size) {
  MT_REQUIRE(vocab_size >= 1 && vocab_size <= kMaxVocab, DataError, "token file ", path, ": vocab_size (",
             vocab_size, ") must be in [1, 2^31)");
  for (size_t i = 0; i < tokens.size(); ++i) {
    MT_REQUIRE(tokens[i] >= 0 && tokens[i] < vocab_size, DataError, "token file ", path, ": token ", i,
               " is ", tokens[i], ", outside [0, vocab_size = ", vocab_size, ")");
  }
  const TokenDType dtype = token_dtype_for_vocab(vocab_size);
  const int64_t width = token_dtype_size(dtype);

  std::vector<unsigned char> bytes(static_cast<size_t>(kTokenFileHeaderBytes + width * std::ssize(tokens)));
  Header h{};
  std::memcpy(h.magic, kTokenFileMagic, sizeof h.magic);
  h.version = kTokenFileVersion;
  h.dtype = static_cast<uint32_t>(dtype);
  h.vocab_size = static_cast<uint32_t>(vocab_size);
  h.count = tokens.size();
  std::memcpy(bytes.data(), &h, sizeof h);
  unsigned char* out = bytes.data() + kTokenFileHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (dtype == TokenDType::u16) {
      const auto v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(out + 2 * i, &v, 2);
    } else {
      const auto v = static_cast<uint32_t>(tokens[i]);
      std::memcpy(out + 4 * i, &v, 4);
    }
  }
  write_file_atomic(path, bytes.data(), std::ssize(bytes));
}

TokenFile TokenFile::open(const std::string& path) {
  TokenFile f;
  f.path_ = path;
  int64_t file_bytes = 0;
  const int fd = open_regular_file(path, kMaxMappedFile, "token file", &file_bytes);
  if (file_bytes < kTokenFileHeaderBytes) {
    ::close(fd);
    MT_THROW(DataError, "token file ", path, " is truncated: ", file_bytes,
             " bytes, but the header alone is ", kTokenFileHeaderBytes, " bytes");
  }
  void* map = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  MT_REQUIRE(map != MAP_FAILED, IoError, "cannot mmap token file ", path, ": ", std::strerror(map_err));
  f.map_ = map;
  f.map_bytes_ = file_bytes;

  // From here `f` owns the mapping: a throw unmaps it.
  Header h;
  std::memcpy(&h, map, sizeof h);
  MT_REQUIRE(std::memcmp(h.magic, kTokenFileMagic, sizeof h.magic) == 0, DataError, "token file ", path,
             ": wrong magic \"", printable(h.magic, 8),
             "\", expected \"MTTOKENS\" (not a meshtrain token file)");
  MT_REQUIRE(h.version == kTokenFileVersion, DataError, "token file ", path, ": unsupported version ",
             h.version, " (this build reads version ", kTokenFileVersion, ")");
  MT_REQUIRE(h.dtype == 1 || h.dtype == 2, DataError, "token file ", path, ": bad token dtype ", h.dtype,
             " (must be 1 = uint16 or 2 = uint32)");
  MT_REQUIRE(h.vocab_size >= 1 && h.vocab_size <= kMaxVocab, DataError, "token file ", path, ": vocab_size ",
             h.vocab_size, " is outside [1, 2^31)");
  f.dtype_ = static_cast<TokenDType>(h.dtype);
  const int64_t width = token_dtype_size(f.dtype_);
  // Counts beyond 2^40 tokens cannot be real; capping them keeps the byte
  // arithmetic below free of overflow.
  const auto payload = static_cast<uint64_t>(file_bytes - kTokenFileHeaderBytes);
  const bool sane = h.count <= (uint64_t{1} << 40);
  if (!sane || h.count * static_cast<uint64_t>(width) != payload) {
    const char* what =
        !sane || h.count * static_cast<uint64_t>(width) > payload ? " is truncated" : " has trailing bytes";
    std::string expected = std::to_string(kTokenFileHeaderBytes) + " + " + std::to_string(h.count) + " * " +
                           std::to_string(width);
    if (sane)
      expected += " = " + std::to_string(kTokenFileHeaderBytes + static_cast<int64_t>(h.count) * width);
    MT_THROW(DataError, "token file ", path, what, ": the header says ", h.count, " tokens of ", width,
             " bytes, so expected ", expected, " bytes, but the file has ", file_bytes, " bytes");
  }
  f.count_ = static_cast<int64_t>(h.count);
  f.vocab_size_ = h.vocab_size;
  f.tokens_ = static_cast<const unsigned char*>(map) + kTokenFileHeaderBytes;
  for (int64_t i = 0; i < f.count_; ++i) {
    const int64_t id = static_cast<uint32_t>(f[i]);  // a uint32 id >= 2^31 reads negative as int32
    MT_REQUIRE(id < f.vocab_size_, DataError, "token file ", path, ": token at offset ", i, " has id ", id,
               ", which is not < vocab_size (", f.vocab_size_, ")");
  }
  return f;
}

TokenFile::~TokenFile() {
  release();
}

TokenFile::TokenFile(TokenFile&& other) noexcept {
  *this = std::move(other);
}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    count_ = std::exchange(other.count_, 0);
    vocab_size_ = std::exchange(other.vocab_size_, 0);
    dtype_ = other.dtype_;
  }
  return *this;
}

void TokenFile::release() {
  if (map_ != nullptr) ::munmap(map_, static_cast<size_t>(map_bytes_));
  map_ = nullptr;
  tokens_ = nullptr;
  map_bytes_ = count_ = vocab_size_ = 0;
}

int32_t TokenFile::operator[](int64_t i) const {
  if (dtype_ == TokenDType::u16) {
    uint16_t v;
    std::memcpy(&v, tokens_ + 2 * i, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, tokens_ + 4 * i, 4);
  return static_cast<int32_t>(v);
}

void TokenFile::copy(int64_t begin, int64_t count, int32_t* out) const {
  MT_CHECK(begin >= 0 && count >= 0 && begin + count <= count_, "range [", begin, ", ", begin + count,
           ") of token file ", path_, " with ", count_, " tokens");
  for (int64_t k = 0; k < count; ++k)
    out[k] = (*this)[begin + k];
}

}  // namespace mt
