// Token files (train.bin, val.bin): a 32-byte little-endian header followed by
// the token ids, uint16 when the vocabulary fits, uint32 otherwise. The exact
// byte layout is in docs/FORMATS.md ("Token file").
//
// A TokenFile is validated once, when it is opened (magic, version, dtype, size,
// every id < vocab_size), so that readers can index it without checks.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace mt {

inline constexpr char kTokenFileMagic[8] = {'M', 'T', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderBytes = 32;

enum class TokenDType : uint32_t { u16 = 1, u32 = 2 };

// Bytes per token of `dtype`.
int64_t token_dtype_size(TokenDType dtype);

// The dtype the writer picks: u16 when every id < vocab_size fits in 16 bits.
TokenDType token_dtype_for_vocab(int64_t vocab_size);

// Writes `tokens` to `path` (through a temporary file in the same folder that is
// renamed over `path`, so a reader never sees a partial file). Throws DataError
// when vocab_size is not in [1, 2^32) or an id is outside [0, vocab_size), and
// IoError when the file cannot be written.
void write_token_file(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size);

// Read-only, memory-mapped view of a validated token file. Move-only; unmaps on
// destruction.
class TokenFile {
 public:
  // Throws IoError when the file cannot be opened or mapped, DataError when its
  // contents break a rule of the format (the message names the file, the value
  // found and the rule).
  static TokenFile open(const std::string& path);

  TokenFile() = default;
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return count_; }  // number of tokens
  int64_t vocab_size() const { return vocab_size_; }
  TokenDType dtype() const { return dtype_; }
  const std::string& path() const { return path_; }

  // Token i, 0 <= i < size() (unchecked).
  int32_t operator[](int64_t i) const;
  // out[k] = token(begin + k) for k in [0, count); the range must lie in the file.
  void copy(int64_t begin, int64_t count, int32_t* out) const;

 private:
  void release();

  std::string path_;
  void* map_ = nullptr;
  int64_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  int64_t count_ = 0;
  int64_t vocab_size_ = 0;
  TokenDType dtype_ = TokenDType::u16;
};

}  // namespace mt
