#include "ops/gemm_onednn.h"

#include <omp.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"

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
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = X + r * ld;
    uint16_t* y = o + r * cols;
    for (int64_t c = 0; c < cols; ++c)
      y[c] = float_to_bf16(x[c]).bits;
  }
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
                        isa_name(dnnl_get_effective_cpu_isa()), " (", probe_implementation(), ")");
}

void sgemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float* C, int64_t ldc, Out out) {
  const bool ta = trans_a == Trans::yes, tb = trans_b == Trans::yes;
  const std::shared_ptr<const Entry> entry = cached_entry(Key{M, N, K, ldc, ta, tb, out == Out::add});
  const Entry& e = *entry;
  thread_local std::vector<uint16_t> a_bits, b_bits;
  thread_local std::vector<uint8_t> scratchpad;
  thread_local dnnl::stream stream(cpu_engine());
  // As stored, A is M × K (K × M when transposed) and B is K × N (N × K).
  round_into(A, ta ? K : M, ta ? M : K, lda, a_bits);
  round_into(B, tb ? N : K, tb ? K : N, ldb, b_bits);
  if (scratchpad.size() < e.scratch.get_size()) scratchpad.resize(e.scratch.get_size());
  try {
    memory a(e.a, cpu_engine(), a_bits.data()), b(e.b, cpu_engine(), b_bits.data());
    memory c(e.c, cpu_engine(), C), s(e.scratch, cpu_engine(), scratchpad.data());
    e.prim.execute(stream,
                   {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, s}});
    stream.wait();
  } catch (const dnnl::error& err) {
    MT_THROW(Error, __FILE__, ":", __LINE__, ": oneDNN bf16 matmul ", M, " x ", N, " x ", K,
             " failed: ", err.what());
  }
}

}  // namespace mt::onednn
