// Checked arithmetic for sizes computed from a config or a file (a shape, a
// vocabulary): a product that does not fit in 64 bits is an error naming
// what was computed, never a wrapped size that a later check then trusts.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"

namespace mt {

// a × b; Err (ConfigError unless a file gave the numbers: DataError) naming `what` on overflow.
template <class Err = ConfigError>
int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw Err(detail::concat("the size of ", what, " (", a, " x ", b, ") does not fit in 64 bits"));
  return r;
}

// a + b, likewise.
template <class Err = ConfigError>
int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    throw Err(detail::concat("the size of ", what, " (", a, " + ", b, ") does not fit in 64 bits"));
  return r;
}

// The element count of `shape` (each dim ≥ 0), checked likewise.
template <class Err = ConfigError>
int64_t checked_numel(const std::vector<int64_t>& shape, const char* what) {
  int64_t n = 1;
  for (const int64_t d : shape) {
    if (d < 0) throw Err(detail::concat("the shape of ", what, " has a negative dimension (", d, ")"));
    n = checked_mul<Err>(n, d, what);
  }
  return n;
}

}  // namespace mt
