// Seeded mutations of a file's bytes for the fuzz tests, the bookkeeping that
// lets a test say which bytes a mutation touched, and the loop every fuzz test runs.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "core/error.h"

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

// The files of a fuzz test: a scratch folder per process and `tag` (removed by
// the test at its end), and whole-file reads and writes.
inline std::string scratch(const std::string& tag, const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mt_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
inline void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// `n` seeded mutations of `orig` (seed() + seed_offset; n = iterations(fallback)):
// each is written to `path` and handed to load_and_check(it, m), which loads it
// — one of meshtrain's errors (mt::Error) counts as refused — and asserts that
// what it loaded differs from the original only where m touched. Both outcomes
// must occur; prints "<what>: n mutations, r refused, a accepted".
template <class LoadAndCheck>
void run_mutations(const char* what, const std::string& orig, const std::string& path, uint64_t seed_offset,
                   int fallback, LoadAndCheck&& load_and_check) {
  std::mt19937_64 rng(seed() + seed_offset);
  int accepted = 0, refused = 0;
  const int n = iterations(fallback);
  for (int it = 0; it < n; ++it) {
    Mutation m;
    spit(path, mutate(orig, rng, &m));
    try {
      load_and_check(it, m);
      ++accepted;
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);
  std::printf("%s: %d mutations, %d refused, %d accepted\n", what, n, refused, accepted);
}

}  // namespace mt::fuzz
