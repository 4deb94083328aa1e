// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), the
// checksum the checkpoint's metadata.json records for each file it lists
// (docs/FORMATS.md). Table-driven, one byte at a time: checkpoints are read
// once per resume, so simplicity wins over speed here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mt {

// crc32c of bytes[0, n), continuing from `crc` (0 for a fresh checksum):
// crc32c(b, crc32c(a)) == crc32c(a + b). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* bytes, size_t n, uint32_t crc = 0);
// The same by tables (slice-by-8): what crc32c runs on a CPU without SSE4.2's
// crc32 instruction, and the tests' reference for the instruction's path.
uint32_t crc32c_portable(const void* bytes, size_t n, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view s, uint32_t crc = 0) {
  return crc32c(s.data(), s.size(), crc);
}

}  // namespace mt
