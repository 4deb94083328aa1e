// Seeded mutations of safetensors and token files: every mutated file is either
// refused with one of meshtrain's errors or loads values that differ from the
// original only in elements whose bytes the mutation changed. A crash (signal)
// fails the test binary; a hang, its ctest timeout.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "data/token_file.h"
#include "formats/safetensors.h"
#include "fuzz/mutate.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

TEST(Fuzz, Safetensors) {
  const std::string path = fuzz::scratch("fuzz", "orig.safetensors");
  std::vector<float> a(12), b(5), c(1);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = 0.5f * static_cast<float>(i) - 2.0f;
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = 100.0f + static_cast<float>(i);
  c[0] = -7.25f;
  write_safetensors(path, {{"w", {3, 4}, a.data()}, {"b", {5}, b.data()}, {"s", {}, c.data()}},
                    {{"format", "pt"}});
  const std::string orig = fuzz::slurp(path);
  uint64_t hlen = 0;
  std::memcpy(&hlen, orig.data(), 8);
  const SafetensorsFile ref = SafetensorsFile::open(path);
  const std::string mpath = fuzz::scratch("fuzz", "mutated.safetensors");
  fuzz::run_mutations("safetensors", orig, mpath, 0, 1500, [&](int it, const fuzz::Mutation& m) {
    const SafetensorsFile f = SafetensorsFile::open(mpath);
    for (const std::string& name : ref.names()) {
      if (!f.has(name) || f.numel(name) != ref.numel(name)) continue;  // the header was changed there
      std::vector<float> want(static_cast<size_t>(ref.numel(name))), got(want.size());
      ref.read_f32(name, want.data(), ref.numel(name));
      try {
        f.read_f32(name, got.data(), f.numel(name));
      } catch (const DataError&) {  // a dtype changed to one that is not fp32
        continue;
      }
      // The element's bytes in the original file.
      const int64_t begin = static_cast<int64_t>(8 + hlen);
      int64_t offset = 0;
      for (const std::string& other : ref.names()) {
        if (other == name) break;
        offset += ref.numel(other) * 4;
      }
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::memcmp(&want[i], &got[i], 4) == 0) continue;
        const size_t at = static_cast<size_t>(begin + offset) + 4 * i;
        EXPECT_TRUE(!m.shifts() && m.touches(at, at + 4))
            << "iteration " << it << ": tensor " << name << "[" << i << "] changed from " << want[i] << " to "
            << got[i] << " though mutation kind " << m.kind << " at byte " << m.pos << " did not touch it";
      }
    }
  });
  fs::remove_all(fs::path(path).parent_path());
}

TEST(Fuzz, TokenFiles) {
  const std::string path = fuzz::scratch("fuzz", "orig.bin");
  std::vector<int32_t> tokens(400);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>((i * 37 + 11) % 300);
  write_token_file(path, tokens, 300);
  const std::string orig = fuzz::slurp(path);
  const std::string mpath = fuzz::scratch("fuzz", "mutated.bin");
  fuzz::run_mutations("token files", orig, mpath, 1, 1500, [&](int it, const fuzz::Mutation& m) {
    const TokenFile f = TokenFile::open(mpath);
    if (f.vocab_size() != 300) {
      EXPECT_TRUE(m.touches(0, kTokenFileHeaderBytes)) << "iteration " << it;
    }
    if (f.size() != static_cast<int64_t>(tokens.size())) {
      EXPECT_TRUE(m.touches(0, kTokenFileHeaderBytes)) << "iteration " << it << ": size " << f.size();
      return;
    }
    const int64_t width = token_dtype_size(f.dtype());
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (f[static_cast<int64_t>(i)] == tokens[i]) continue;
      const size_t at = static_cast<size_t>(kTokenFileHeaderBytes + width * static_cast<int64_t>(i));
      EXPECT_TRUE(!m.shifts() &&
                  (m.touches(at, at + static_cast<size_t>(width)) || m.touches(0, kTokenFileHeaderBytes)))
          << "iteration " << it << ": token " << i << " changed from " << tokens[i] << " to "
          << f[static_cast<int64_t>(i)] << " though mutation kind " << m.kind << " at byte " << m.pos
          << " did not touch it";
    }
  });
  fs::remove_all(fs::path(path).parent_path());
}

}  // namespace
}  // namespace mt
