#include "ops/gemm_onednn.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "ops/gemm_amx.h"
#include "ops/vec_math.h"

namespace mt::onednn {
namespace {

using dnnl::memory;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_sse41:
      return "sse41";
    default:
      return "an ISA older than sse41";
  }
}

// The ISA oneDNN dispatches to here: the CPU's, capped by ONEDNN_MAX_CPU_ISA.
// The bf16 instructions are AVX512-BF16 (vdpbf16ps) and AMX-BF16 (tdpbf16ps);
// the ISA values are nested bit sets, so AMX includes avx512_core_bf16.
bool has_bf16_units(dnnl_cpu_isa_t isa) {
  const auto bits = static_cast<unsigned>(isa), bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
  return (bits & bf16) == bf16;
}

// A product's shape and mode: what a primitive is built for. The operands are
// packed densely (as stored, transposed or not), so only C's stride varies.
struct Key {
  int64_t M, N, K, ldc;
  bool ta, tb, add;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = 0;
    for (int64_t v : {k.M, k.N, k.K, k.ldc, static_cast<int64_t>(k.ta + 2 * k.tb + 4 * k.add)})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

struct Entry {
  dnnl::matmul prim;
  memory::desc a, b, c, scratch;
};

// Row-major op(A)[M, K] · op(B)[K, N] with bf16 operands packed as stored
// (A: M × K, or K × M read through strides when transposed; B likewise), an
// fp32 C with row stride ldc, and C's previous value added (sum post-op) for
// Out::add. The scratchpad is the caller's, so that threads never share one.
Entry make_entry(const Key& k) {
  const memory::desc a({k.M, k.K}, memory::data_type::bf16,
                       k.ta ? memory::dims{1, k.M} : memory::dims{k.K, 1});
  const memory::desc b({k.K, k.N}, memory::data_type::bf16,
                       k.tb ? memory::dims{1, k.K} : memory::dims{k.N, 1});
  const memory::desc c({k.M, k.N}, memory::data_type::f32, memory::dims{k.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.add) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
  return Entry{dnnl::matmul(pd), a, b, c, pd.scratchpad_desc()};
}

// One primitive per shape and mode, built on first use and kept (a training
// run has a few dozen shapes; attention's tiles add at most 64 × 64 per
// head size). Past kMaxEntries — generation's varying row counts — the cache
// starts again; an entry in use stays alive through its shared_ptr.
constexpr size_t kMaxEntries = 4096;

std::shared_ptr<const Entry> cached_entry(const Key& k) {
  static std::mutex mutex;
  static std::unordered_map<Key, std::shared_ptr<const Entry>, KeyHash> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = cache.find(k); it != cache.end()) return it->second;
  if (cache.size() >= kMaxEntries) cache.clear();
  try {
    return cache[k] = std::make_shared<const Entry>(make_entry(k));
  } catch (const dnnl::error& e) {
    MT_THROW(Error, __FILE__, ":", __LINE__, ": oneDNN bf16 matmul ", k.M, " x ", k.N, " x ", k.K,
             " could not be built: ", e.what());
  }
}

// The stored rows × cols block of X (row stride ld) as bf16 bits, rounded as
// core/bf16.h rounds (to nearest, ties to even), packed densely. Large blocks
// are split over the OpenMP threads (elementwise, so the bits do not depend
// on the split); inside a parallel region this runs on the calling thread.
void round_into(const float* X, int64_t rows, int64_t cols, int64_t ld, std::vector<uint16_t>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  uint16_t* o = out.data();
#pragma omp parallel for schedule(static) if (rows * cols >= (int64_t{1} << 16))
  for (int64_t r = 0; r < rows; ++r)
    to_bf16_bits(X + r * ld, cols, o + r * cols);
}

std::string probe_implementation() {
  try {
    const Key k{256, 512, 512, 512, false, true, false};
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(memory::desc({k.M, k.K}, memory::data_type::bf16, memory::dims{k.K, 1}),
                           memory::desc({k.K, k.N}, memory::data_type::bf16, memory::dims{1, k.K}),
                           memory::desc({k.M, k.N}, memory::data_type::f32, memory::dims{k.ldc, 1})),
        cpu_engine());
    return pd.impl_info_str();
  } catch (const dnnl::error& e) {
    return std::string("no implementation: ") + e.what();
  }
}

// The products that fit go to AMX tiles only where oneDNN would run AMX too.
bool small_products_on_tiles() {
  static const bool on =
      dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_amx && amx::unavailable_reason().empty();
  return on;
}

// The step's kept weight bits (Bf16WeightBits, gemm.h): the ranges they may
// come from and the bits by weight address and shape (a weight read whole and
// a block of it from the same address are two entries, so that an entry's
// bits never change while a product reads them).
struct WeightKey {
  const float* address;
  int64_t rows, cols;
  bool operator==(const WeightKey&) const = default;
};

struct WeightKeyHash {
  size_t operator()(const WeightKey& k) const {
    return std::hash<const float*>()(k.address) * 1000003u ^ std::hash<int64_t>()(k.rows * 65599 + k.cols);
  }
};

struct WeightBits {
  std::mutex mutex;
  std::vector<std::span<const float>> ranges;
  struct Kept {
    bool fresh = false;  // rounded under the current ranges
    std::vector<uint16_t> bits;
  };
  std::unordered_map<WeightKey, Kept, WeightKeyHash> bits;
};

WeightBits& weight_bits_state() {
  static WeightBits w;
  return w;
}

// The bf16 bits of the dense weight W [rows, cols]: kept ones where W lies in
// a range of the step's Bf16WeightBits (rounded on first use), else rounded
// into `scratch`.
const uint16_t* weight_bits(const float* W, int64_t rows, int64_t cols, std::vector<uint16_t>& scratch) {
  WeightBits& w = weight_bits_state();
  const std::lock_guard<std::mutex> lock(w.mutex);
  const auto inside = [&](std::span<const float> r) {
    return std::less_equal<const float*>()(r.data(), W) &&
           std::less_equal<const float*>()(W + rows * cols, r.data() + r.size());
  };
  if (!std::any_of(w.ranges.begin(), w.ranges.end(), inside)) {
    round_into(W, rows, cols, cols, scratch);
    return scratch.data();
  }
  WeightBits::Kept& kept = w.bits[WeightKey{W, rows, cols}];
  if (!kept.fresh) {
    round_into(W, rows, cols, cols, kept.bits);
    kept.fresh = true;
  }
  return kept.bits.data();
}

// C = (or +=) the product the key describes, of operands already rounded
// (packed densely as stored).
void run_rounded(const Key& k, const uint16_t* a_bits, const uint16_t* b_bits, float* C) {
  const std::shared_ptr<const Entry> entry = cached_entry(k);
  const Entry& e = *entry;
  thread_local std::vector<uint8_t> scratchpad;
  thread_local dnnl::stream stream(cpu_engine());
  if (scratchpad.size() < e.scratch.get_size()) scratchpad.resize(e.scratch.get_size());
  try {
    memory a(e.a, cpu_engine(), const_cast<uint16_t*>(a_bits)),
        b(e.b, cpu_engine(), const_cast<uint16_t*>(b_bits));
    memory c(e.c, cpu_engine(), C), s(e.scratch, cpu_engine(), scratchpad.data());
    e.prim.execute(stream,
                   {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, s}});
    stream.wait();
  } catch (const dnnl::error& err) {
    MT_THROW(Error, __FILE__, ":", __LINE__, ": oneDNN bf16 matmul ", k.M, " x ", k.N, " x ", k.K,
             " failed: ", err.what());
  }
}

}  // namespace

const std::string& unavailable_reason() {
  static const std::string reason = [] {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (has_bf16_units(isa)) return std::string();
    return std::string("the CPU's ISA for oneDNN, ") + isa_name(isa) +
           ", has no bf16 instructions (AVX512-BF16 or AMX)";
  }();
  return reason;
}

std::string describe() {
  const dnnl_version_t* v = dnnl_version();
  return detail::concat("oneDNN ", v->major, ".", v->minor, ".", v->patch, " ",
                        isa_name(dnnl_get_effective_cpu_isa()), " (", probe_implementation(), ")",
                        small_products_on_tiles() ? "; products up to 128 x 128 x 256 on AMX tiles" : "");
}

bool tiles_take(int64_t M, int64_t N, int64_t K) {
  return amx::fits(M, N, K) && small_products_on_tiles();
}

void sgemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float* C, int64_t ldc, Out out) {
  if (tiles_take(M, N, K))
    amx::sgemm_bf16(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, out);
  else
    matmul_bf16(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, out);
}

void matmul_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float* C, int64_t ldc, Out out) {
  const bool ta = trans_a == Trans::yes, tb = trans_b == Trans::yes;
  thread_local std::vector<uint16_t> a_bits, b_bits;
  // As stored, A is M × K (K × M when transposed) and B is K × N (N × K).
  round_into(A, ta ? K : M, ta ? M : K, lda, a_bits);
  round_into(B, tb ? N : K, tb ? K : N, ldb, b_bits);
  run_rounded(Key{M, N, K, ldc, ta, tb, out == Out::add}, a_bits.data(), b_bits.data(), C);
}

void set_weight_ranges(std::vector<std::span<const float>> ranges) {
  WeightBits& w = weight_bits_state();
  const std::lock_guard<std::mutex> lock(w.mutex);
  w.ranges = std::move(ranges);
  for (auto& [key, kept] : w.bits)
    kept.fresh = false;  // rounded again on next use, into the memory it has
}

void linear_forward_bf16(float* out, const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC,
                         Out mode) {
  thread_local std::vector<uint16_t> inp_bits, weight_scratch;
  round_into(inp, N, IC, IC, inp_bits);
  // out[N, OC] = inp[N, IC] · weight[OC, IC]ᵀ
  run_rounded(Key{N, OC, IC, OC, false, true, mode == Out::add}, inp_bits.data(),
              weight_bits(weight, OC, IC, weight_scratch), out);
}

void linear_backward_bf16(float* dinp, float* dweight, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IC, int64_t OC) {
  thread_local std::vector<uint16_t> dout_bits, inp_bits, weight_scratch;
  round_into(dout, N, OC, OC, dout_bits);
  // dinp[N, IC] = dout[N, OC] · weight[OC, IC]; dweight[OC, IC] += dout[N, OC]ᵀ · inp[N, IC]
  if (dinp != nullptr)
    run_rounded(Key{N, IC, OC, IC, false, false, false}, dout_bits.data(),
                weight_bits(weight, OC, IC, weight_scratch), dinp);
  if (dweight != nullptr) {
    round_into(inp, N, IC, IC, inp_bits);
    run_rounded(Key{OC, IC, N, IC, true, false, true}, dout_bits.data(), inp_bits.data(), dweight);
  }
}

}  // namespace mt::onednn
