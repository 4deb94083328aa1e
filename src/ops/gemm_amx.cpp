#include "ops/gemm_amx.h"

#include <algorithm>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "ops/vec_math.h"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define MT_AMX_POSSIBLE 1
#else
#define MT_AMX_POSSIBLE 0
#endif

namespace mt::amx {
namespace {

// C is computed in 32 × 32 blocks (four 16 × 16 fp32 accumulator tiles, the
// other four tile registers holding two 16 × 32 slices of A and two of B),
// K in steps of 32 (16 bf16 pairs); the packed operands are padded with zeros
// to those multiples, which add exact zeros to every sum.
constexpr int64_t kStep = 32;

constexpr int64_t padded(int64_t x) {
  return (x + kStep - 1) / kStep * kStep;
}

inline uint32_t bf16_pair(float lo, float hi) {
  return static_cast<uint32_t>(float_to_bf16(lo).bits) | static_cast<uint32_t>(float_to_bf16(hi).bits) << 16;
}

// w[j] = the bf16 bits of x0[j] in the low half, of x1[j] in the high half
// (0 when x1 is null: the zero padding of an odd K), j < n.
void interleave_rows(const float* x0, const float* x1, int64_t n, uint32_t* w) {
  if (x1 == nullptr) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j)
      w[j] = float_to_bf16(x0[j]).bits;
    return;
  }
#pragma omp simd
  for (int64_t j = 0; j < n; ++j)
    w[j] = bf16_pair(x0[j], x1[j]);
}

#if MT_AMX_POSSIBLE
// GCC 12 warns, wrongly, that the intrinsics' own undefined-vector helpers
// (avx512fintrin.h's __Y) are used uninitialised once inlined at -O3.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// One 16 × 16 block of 32-bit words: dst row c = src column c. Three rounds of
// interleaves: 32-bit pairs, 64-bit pairs, then the 128-bit lanes.
__attribute__((target("avx512f"))) void transpose_16x16(const uint32_t* src, int64_t src_ld, uint32_t* dst,
                                                        int64_t dst_ld) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i)
    r[i] = _mm512_loadu_si512(src + i * src_ld);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4g + q], lane j: column 4j + q of rows 4g .. 4g + 3.
  for (int g = 0; g < 16; g += 4) {
    r[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    r[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    r[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    r[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int q = 0; q < 4; ++q) {
    const __m512i even_lo = _mm512_shuffle_i32x4(r[q], r[4 + q], 0x88);  // lanes 0, 2 of rows 0-3 and 4-7
    const __m512i odd_lo = _mm512_shuffle_i32x4(r[q], r[4 + q], 0xDD);   // lanes 1, 3
    const __m512i even_hi = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0x88);
    const __m512i odd_hi = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0xDD);
    _mm512_storeu_si512(dst + q * dst_ld, _mm512_shuffle_i32x4(even_lo, even_hi, 0x88));
    _mm512_storeu_si512(dst + (4 + q) * dst_ld, _mm512_shuffle_i32x4(odd_lo, odd_hi, 0x88));
    _mm512_storeu_si512(dst + (8 + q) * dst_ld, _mm512_shuffle_i32x4(even_lo, even_hi, 0xDD));
    _mm512_storeu_si512(dst + (12 + q) * dst_ld, _mm512_shuffle_i32x4(odd_lo, odd_hi, 0xDD));
  }
}
#pragma GCC diagnostic pop
#endif

// dst[c · dst_ld + r] = src[r · src_ld + c] for r < rows, c < cols: whole
// 16 × 16 blocks with AVX-512 (every CPU with AMX has it), the edges word by word.
void transpose_words(const uint32_t* src, int64_t rows, int64_t cols, int64_t src_ld, uint32_t* dst,
                     int64_t dst_ld) {
  constexpr int64_t kB = 16;
  const int64_t full_rows = MT_AMX_POSSIBLE ? rows / kB * kB : 0,
                full_cols = MT_AMX_POSSIBLE ? cols / kB * kB : 0;
#if MT_AMX_POSSIBLE
  for (int64_t r0 = 0; r0 < full_rows; r0 += kB) {
    for (int64_t c0 = 0; c0 < full_cols; c0 += kB)
      transpose_16x16(src + r0 * src_ld + c0, src_ld, dst + c0 * dst_ld + r0, dst_ld);
  }
#endif
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = r < full_rows ? full_cols : 0; c < cols; ++c)
      dst[c * dst_ld + r] = src[r * src_ld + c];
  }
}

// Row k of a K-row stored operand X (row stride ld), or null past its end.
inline const float* stored_row(const float* X, int64_t ld, int64_t k, int64_t K) {
  return k < K ? X + k * ld : nullptr;
}

// The tile products read op(A) [M, K] row-major (row stride Kp) and op(B)
// [K, N] pair-interleaved ("VNNI": bf16 pair (2i, 2i + 1) of column n as the
// 32-bit word (i, n), row stride Np words), both as bf16 bits. A stored
// operand whose rows run along K (A as stored, B transposed) is rounded row
// by row; one whose rows run along M or N (A transposed, B as stored) is
// interleaved two rows at a time; either way one of the two then needs a
// transpose of 32-bit words, done through `words` scratch.
void pack_a(bool ta, int64_t M, int64_t K, const float* A, int64_t lda, uint16_t* Ap, int64_t Kp,
            uint32_t* words) {
  if (!ta) {
    for (int64_t m = 0; m < M; ++m)
      to_bf16_bits(A + m * lda, K, Ap + m * Kp);
    return;
  }
  const int64_t pairs = (K + 1) / 2;  // A stored K × M
  for (int64_t i = 0; i < pairs; ++i)
    interleave_rows(A + 2 * i * lda, stored_row(A, lda, 2 * i + 1, K), M, words + i * M);
  transpose_words(words, pairs, M, M, reinterpret_cast<uint32_t*>(Ap), Kp / 2);
}

void pack_b(bool tb, int64_t K, int64_t N, const float* B, int64_t ldb, uint16_t* Bp, int64_t Np,
            uint32_t* words) {
  auto* out = reinterpret_cast<uint32_t*>(Bp);
  if (!tb) {  // B stored K × N
    for (int64_t i = 0; i < (K + 1) / 2; ++i)
      interleave_rows(B + 2 * i * ldb, stored_row(B, ldb, 2 * i + 1, K), N, out + i * Np);
    return;
  }
  const int64_t Kp = padded(K);  // B stored N × K: round each row, then the pairs become rows
  auto* rounded = reinterpret_cast<uint16_t*>(words);
  for (int64_t n = 0; n < N; ++n) {
    to_bf16_bits(B + n * ldb, K, rounded + n * Kp);
    if (K % 2 == 1) rounded[n * Kp + K] = 0;
  }
  transpose_words(words, N, (K + 1) / 2, Kp / 2, out, Np);
}

#if MT_AMX_POSSIBLE

// The palette-1 configuration: all eight tiles 16 rows × 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// C [Mp, Np] (row stride ldc) = Ap [Mp, Kp] · Bp, or += with `add` (C then
// read into the accumulators first), all dimensions multiples of kStep. The
// tile state is released at the end, so that no other code (oneDNN's kernels
// set their own configuration) can run on this one.
__attribute__((target("amx-tile,amx-bf16"))) void tile_products(const uint16_t* Ap, const uint16_t* Bp,
                                                                float* C, int64_t ldc, bool add, int64_t Mp,
                                                                int64_t Np, int64_t Kp) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.bytes_per_row[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  const long a_stride = static_cast<long>(Kp * 2), b_stride = static_cast<long>(Np * 4);
  const long c_stride = static_cast<long>(ldc * 4);
  for (int64_t m0 = 0; m0 < Mp; m0 += kStep) {
    for (int64_t n0 = 0; n0 < Np; n0 += kStep) {
      float* c = C + m0 * ldc + n0;
      if (add) {
        _tile_loadd(0, c, c_stride);
        _tile_loadd(1, c + 16, c_stride);
        _tile_loadd(2, c + 16 * ldc, c_stride);
        _tile_loadd(3, c + 16 * ldc + 16, c_stride);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t k0 = 0; k0 < Kp; k0 += kStep) {
        const uint16_t* b = Bp + (k0 / 2) * 2 * Np;
        _tile_loadd(4, Ap + m0 * Kp + k0, a_stride);
        _tile_loadd(5, Ap + (m0 + 16) * Kp + k0, a_stride);
        _tile_loadd(6, b + 2 * n0, b_stride);
        _tile_loadd(7, b + 2 * (n0 + 16), b_stride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, c, c_stride);
      _tile_stored(1, c + 16, c_stride);
      _tile_stored(2, c + 16 * ldc, c_stride);
      _tile_stored(3, c + 16 * ldc + 16, c_stride);
    }
  }
  _tile_release();
}

std::string probe() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return "the CPU reports no feature leaf 7";
  constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;  // CPUID.(7,0):EDX
  if ((edx & kAmxBf16) == 0 || (edx & kAmxTile) == 0) return "the CPU has no AMX-BF16";
  // Linux hands out the 8 KiB tile state only to a process that asks for it
  // (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); asking twice is harmless.
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtileData = 18;
  if (syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtileData) != 0)
    return "Linux did not grant the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
  return "";
}

#else

void tile_products(const uint16_t*, const uint16_t*, float*, int64_t, bool, int64_t, int64_t, int64_t) {}

std::string probe() {
  return "AMX tiles are built only for x86-64 Linux";
}

#endif

}  // namespace

const std::string& unavailable_reason() {
  static const std::string reason = probe();
  return reason;
}

void sgemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float* C, int64_t ldc, Out out) {
  MT_REQUIRE(M >= 1 && N >= 1 && K >= 1 && fits(M, N, K), Error, "amx::sgemm_bf16: ", M, " x ", N, " x ", K,
             " is not a product it takes (at most ", kMaxRows, " x ", kMaxCols, " x ", kMaxDepth, ")");
  const int64_t Mp = padded(M), Np = padded(N), Kp = padded(K);
  thread_local std::vector<uint16_t> a_bits(kMaxRows * kMaxDepth), b_bits(kMaxDepth * kMaxCols);
  thread_local std::vector<uint32_t> words(kMaxDepth * std::max(kMaxRows, kMaxCols) / 2);
  thread_local std::vector<float> c_tiles(kMaxRows * kMaxCols);
  if (M < Mp || K < Kp) std::fill(a_bits.begin(), a_bits.begin() + Mp * Kp, uint16_t{0});
  if (N < Np || K < Kp) std::fill(b_bits.begin(), b_bits.begin() + Kp * Np, uint16_t{0});
  pack_a(trans_a == Trans::yes, M, K, A, lda, a_bits.data(), Kp, words.data());
  pack_b(trans_b == Trans::yes, K, N, B, ldb, b_bits.data(), Np, words.data());
  if (M == Mp && N == Np) {  // whole blocks: the accumulators read and write C in place
    tile_products(a_bits.data(), b_bits.data(), C, ldc, out == Out::add, Mp, Np, Kp);
    return;
  }
  tile_products(a_bits.data(), b_bits.data(), c_tiles.data(), Np, false, Mp, Np, Kp);
  for (int64_t m = 0; m < M; ++m) {
    const float* c = c_tiles.data() + m * Np;
    float* o = C + m * ldc;
    if (out == Out::add) {
#pragma omp simd
      for (int64_t n = 0; n < N; ++n)
        o[n] += c[n];
    } else {
      std::copy(c, c + N, o);
    }
  }
}

}  // namespace mt::amx
