// Seeded mutations of a file's bytes for the fuzz tests, and the bookkeeping
// that lets a test say which bytes a mutation touched.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace mt::fuzz {

// One mutation: the bytes [pos, pos + len) of the original were changed
// (in place), removed, or had bytes inserted before them; or the file was cut
// at pos.
struct Mutation {
  enum Kind { flip, set, insert, erase, truncate } kind = flip;
  size_t pos = 0;
  size_t len = 0;
  // True when the original's bytes [a, b) are where the mutation happened.
  bool touches(size_t a, size_t b) const {
    if (kind == truncate) return b > pos;
    const size_t end = pos + std::max<size_t>(len, 1);
    return a < end && pos < b;
  }
  bool shifts() const { return kind == insert || kind == erase; }
};

// The number of mutations per format: MT_FUZZ_ITERS, or `fallback` (what
// `make test` runs).
inline int iterations(int fallback) {
  const char* env = std::getenv("MT_FUZZ_ITERS");
  return env != nullptr ? std::max(1, std::atoi(env)) : fallback;
}
inline uint64_t seed() {
  const char* env = std::getenv("MT_FUZZ_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 20261130;
}

// Applies one random mutation to `bytes`; `m` records it.
inline std::string mutate(const std::string& bytes, std::mt19937_64& rng, Mutation* m) {
  static const char special[] = {'\0', '\xff', '9', '0', '"', '}',  '{', ' ',
                                 '-',  '.',    'e', ',', '[', '\n', '='};
  std::string out = bytes;
  const size_t n = bytes.size();
  m->kind = static_cast<Mutation::Kind>(rng() % 5);
  m->pos = n == 0 ? 0 : rng() % n;
  m->len = 1 + rng() % 4;
  switch (m->kind) {
    case Mutation::flip:
      m->len = 1;
      if (n > 0) out[m->pos] = static_cast<char>(out[m->pos] ^ (1 << (rng() % 8)));
      break;
    case Mutation::set:
      m->len = std::min(m->len, n - m->pos);
      for (size_t i = 0; i < m->len; ++i)
        out[m->pos + i] = special[rng() % sizeof(special)];
      break;
    case Mutation::insert: {
      std::string ins;
      for (size_t i = 0; i < m->len; ++i)
        ins += special[rng() % sizeof(special)];
      out.insert(m->pos, ins);
      m->len = 1;  // the original byte before which they went
      break;
    }
    case Mutation::erase:
      m->len = std::min(m->len, n - m->pos);
      out.erase(m->pos, m->len);
      break;
    case Mutation::truncate:
      out.resize(m->pos);
      break;
  }
  return out;
}

}  // namespace mt::fuzz
