// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// Initial values are a pure function of (seed, parameter name, global element
// index): the key comes from the seed and a hash of the name, the counter is the
// element index. A rank that owns a shard generates exactly its slice, and the
// shards assembled equal the single-process tensor bit for bit.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace mt {

using PhiloxKey = std::array<uint32_t, 2>;
using PhiloxCounter = std::array<uint32_t, 4>;

// Ten rounds of Philox4x32 on `counter` under `key`.
PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key);

// 64-bit FNV-1a of a name (stable across platforms and runs).
uint64_t fnv1a64(std::string_view s);

// Key for the stream of parameter `name` under run seed `seed`.
PhiloxKey philox_key(uint64_t seed, std::string_view name);

// Standard normal sample number `index` of the stream `key` (Box-Muller on two
// 53-bit uniforms drawn from the counter `index`), computed in double.
double philox_normal(PhiloxKey key, uint64_t index);

// Uniform in [0, 1) with 53 bits, sample number `index` of the stream `key`.
double philox_uniform(PhiloxKey key, uint64_t index);

// Fills out[i] = std * normal(key, first + i) for i in [0, n).
void fill_normal(float* out, int64_t n, PhiloxKey key, uint64_t first, float std);

}  // namespace mt
