#include "core/philox.h"

#include <cmath>
#include <numbers>

namespace mt {

namespace {
constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

inline double to_unit(uint32_t hi, uint32_t lo) {
  // 53 random bits -> [0, 1)
  const uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}
}  // namespace

PhiloxCounter philox4x32(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

PhiloxKey philox_key(uint64_t seed, std::string_view name) {
  // Mix the seed through one Philox evaluation so that nearby seeds and names
  // give unrelated keys.
  const uint64_t h = fnv1a64(name);
  const PhiloxCounter c =
      philox4x32({static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32), 0x6d657368u, 0x74726169u},
                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return {c[0], c[1]};
}

double philox_uniform(PhiloxKey key, uint64_t index) {
  const PhiloxCounter c =
      philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u}, key);
  return to_unit(c[0], c[1]);
}

double philox_normal(PhiloxKey key, uint64_t index) {
  const PhiloxCounter c =
      philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 1u, 0u}, key);
  const double u1 = 1.0 - to_unit(c[0], c[1]);  // (0, 1]: log is finite
  const double u2 = to_unit(c[2], c[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void fill_normal(float* out, int64_t n, PhiloxKey key, uint64_t first, float std) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(std * philox_normal(key, first + static_cast<uint64_t>(i)));
  }
}

}  // namespace mt
