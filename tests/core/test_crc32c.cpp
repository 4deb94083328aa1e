// CRC-32C against published values: the catalogue's check value of
// "123456789" and the iSCSI test vectors of RFC 3720 (appendix B.4), plus
// the continuation rule the checkpoint writer relies on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/crc32c.h"

namespace mt {
namespace {

TEST(Crc32c, StandardCheckValue) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(Crc32c, Rfc3720Vectors) {
  const std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF);
  std::vector<unsigned char> up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[static_cast<size_t>(i)] = static_cast<unsigned char>(i);
    down[static_cast<size_t>(i)] = static_cast<unsigned char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), up.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down.data(), down.size()), 0x113FDB5Cu);
}

// The table path (crc32c_portable) on the same published values, and the two
// paths equal on every length 0..100 and odd starts, so that a machine
// without the crc32 instruction computes the same checksums.
TEST(Crc32c, PortablePathAgrees) {
  EXPECT_EQ(crc32c_portable("123456789", 9), 0xE3069283u);
  const std::vector<unsigned char> ones(32, 0xFF);
  EXPECT_EQ(crc32c_portable(ones.data(), ones.size()), 0x62A8AB43u);
  std::vector<unsigned char> bytes(128);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t start = 0; start < 3; ++start)
    for (size_t n = 0; n <= 100; ++n)
      EXPECT_EQ(crc32c(bytes.data() + start, n, 0x1234u), crc32c_portable(bytes.data() + start, n, 0x1234u));
}

TEST(Crc32c, ContinuesAcrossPieces) {
  const std::string a = "1234", b = "56789";
  EXPECT_EQ(crc32c(b, crc32c(a)), crc32c(a + b));
}

}  // namespace
}  // namespace mt
