// The hashes of --fingerprint (docs/FINGERPRINT.md "Coordinates"): an
// element's coordinate, and its value at that coordinate, as 64-bit words
// whose sums (mod 2^64) over a tensor's elements do not depend on the order
// or the pieces they are added in.
#pragma once

#include <cstdint>

namespace mt::fp {

inline constexpr const char* kMagic = "meshtrain-fingerprint";

// SplitMix64's finaliser: every input bit moves about half the output bits.
inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// (global sequence, position in it, global column) of an activation.
inline uint64_t activation_coord(int64_t seq, int32_t pos, int64_t col) {
  const uint64_t row = (static_cast<uint64_t>(seq) << 32) ^ static_cast<uint32_t>(pos);
  return mix(mix(row) ^ (static_cast<uint64_t>(col) * 0xc2b2ae3d27d4eb4fULL));
}

// The row-major index of an element of a full parameter.
inline uint64_t param_coord(int64_t index) {
  return mix(static_cast<uint64_t>(index) ^ 0x5851f42d4c957f2dULL);
}

// The value's bits at a coordinate.
inline uint64_t value_hash(uint64_t coord, uint32_t bits) {
  return mix(coord ^ (static_cast<uint64_t>(bits) * 0x165667b19e3779f9ULL));
}

}  // namespace mt::fp
