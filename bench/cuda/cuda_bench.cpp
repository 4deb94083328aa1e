// GPU benchmark (docs/GPU.md): cuBLAS GEMM rates (fp32 with TF32 off, TF32,
// bf16 with fp32 accumulation) at large shapes, then each kernel of src/cuda/
// at a Llama-1B-like shape with its time and achieved bandwidth (attention:
// FLOP rate). Times are medians of CUDA-event-timed repeats after a warm-up.
// Prints two tables; `--quick` uses fewer repeats.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/gemm.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"

namespace mt::cuda {
namespace {

int g_reps = 10;

// Median milliseconds of fn over g_reps timed runs after one warm-up.
double time_ms(const std::function<void()>& fn) {
  fn();
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  MT_CUDA_CHECK(cudaEventCreate(&start));
  MT_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int r = 0; r < g_reps; ++r) {
    MT_CUDA_CHECK(cudaEventRecord(start));
    fn();
    MT_CUDA_CHECK(cudaEventRecord(stop));
    MT_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    MT_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  MT_CUDA_CHECK(cudaEventDestroy(start));
  MT_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Uniform values in [-1, 1) from a hash of the index (no zeros: they can run
// faster than real data), generated on the host once per size class.
std::vector<float> host_random(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 1u;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    x = static_cast<float>(s >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  return v;
}

Array<float> random_array(int64_t n, uint32_t seed) {
  return Array<float>(host_random(n, seed));
}

struct Shape {
  int64_t M, N, K;
  const char* what;
};

void bench_gemms() {
  const Shape shapes[] = {{8192, 8192, 8192, "square"},
                          {8192, 2048, 2048, "llama1b q/o proj (B*T=8192)"},
                          {8192, 11264, 2048, "llama1b gate+up"},
                          {8192, 2048, 5632, "llama1b down"}};
  Blas blas;
  std::printf("\n== cuBLAS GEMM, C[M,N] = A[M,K] * B[N,K]^T, TFLOP/s (median of %d)\n", g_reps);
  std::printf("%-30s %6s %6s %6s %10s %10s %10s\n", "shape", "M", "N", "K", "fp32", "tf32", "bf16");
  for (const Shape& s : shapes) {
    Array<float> A = random_array(s.M * s.K, 1), B = random_array(s.N * s.K, 2), C(s.M * s.N);
    Array<bf16> Ah(s.M * s.K), Bh(s.N * s.K);
    f32_to_bf16(Ah.data(), A.data(), s.M * s.K);
    f32_to_bf16(Bh.data(), B.data(), s.N * s.K);
    const double flop = 2.0 * static_cast<double>(s.M) * s.N * s.K;
    auto run = [&](GemmMath m) {
      return time_ms([&] {
        sgemm(blas, Trans::no, Trans::yes, s.M, s.N, s.K, A.data(), s.K, B.data(), s.K, C.data(), s.N,
              Out::assign, m);
      });
    };
    const double t32 = run(GemmMath::fp32), ttf = run(GemmMath::tf32);
    const double tbf = time_ms([&] {
      gemm_bf16(blas, Trans::no, Trans::yes, s.M, s.N, s.K, Ah.data(), s.K, Bh.data(), s.K, C.data(), s.N,
                Out::assign);
    });
    std::printf("%-30s %6lld %6lld %6lld %10.1f %10.1f %10.1f\n", s.what, static_cast<long long>(s.M),
                static_cast<long long>(s.N), static_cast<long long>(s.K), flop / t32 / 1e9, flop / ttf / 1e9,
                flop / tbf / 1e9);
    std::printf("GEMM %s fp32=%.1f tf32=%.1f bf16=%.1f\n", s.what, flop / t32 / 1e9, flop / ttf / 1e9,
                flop / tbf / 1e9);
  }
}

// One row of the kernel table: time, and bytes or FLOPs per call.
void row(const char* name, double ms, double bytes, double flop) {
  std::printf("%-34s %10.3f %10.1f %10.1f\n", name, ms, bytes > 0 ? bytes / ms / 1e6 : 0.0,
              flop > 0 ? flop / ms / 1e9 : 0.0);
  std::printf("KERNEL %s ms=%.3f GBps=%.1f TFLOPs=%.1f\n", name, ms, bytes > 0 ? bytes / ms / 1e6 : 0.0,
              flop > 0 ? flop / ms / 1e9 : 0.0);
}

// Llama-1B-like layer shapes: d_model 2048, 16 heads (128 dims), 8 KV heads,
// ffn 5632, sequence 2048, batch 4 (8192 tokens), vocabulary 32000.
constexpr int64_t kB = 4, kT = 2048, kC = 2048, kH = 16, kKV = 8, kD = 128, kF = 5632, kV = 32000;
constexpr int64_t kN = kB * kT;

void bench_rowwise() {
  const double f4 = 4.0;
  Array<float> x = random_array(kN * kC, 3), y(kN * kC), dy = random_array(kN * kC, 4),
               w = random_array(kC, 5);
  Array<float> rstd(kN), dw(kC), table = random_array(kV * kC, 6), dtable(kV * kC);
  Array<int32_t> ids(std::vector<int32_t>(kN, 0));
  {
    std::vector<int32_t> h(kN);
    for (int64_t i = 0; i < kN; ++i)
      h[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % kV);
    ids.upload(h);
  }
  row("embedding_forward", time_ms([&] { embedding_forward(y.data(), ids.data(), table.data(), kN, kC); }),
      2 * f4 * kN * kC, 0);
  row("embedding_backward",
      time_ms([&] { embedding_backward(dtable.data(), dy.data(), ids.data(), kN, kC); }), 3 * f4 * kN * kC,
      0);
  row("rmsnorm_forward",
      time_ms([&] { rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), kN, kC, 1e-5f); }),
      2 * f4 * kN * kC, 0);
  row("rmsnorm_backward", time_ms([&] {
        rmsnorm_backward(y.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), kN, kC);
      }),
      5 * f4 * kN * kC, 0);
  Array<float> cs(kT * kD / 2), sn(kT * kD / 2);
  std::vector<int32_t> hp(kN);
  for (int64_t i = 0; i < kN; ++i)
    hp[static_cast<size_t>(i)] = static_cast<int32_t>(i % kT);
  Array<int32_t> pos(hp);
  rope_table_fill(cs.data(), sn.data(), kT, kD, 10000.0);
  const RopeTableView rt{cs.data(), sn.data(), kT, kD};
  row("rope_forward (q)", time_ms([&] { rope_forward(x.data(), pos.data(), rt, kN, kH, kC); }),
      2 * f4 * kN * kC, 0);
  Array<float> gu = random_array(kN * 2 * kF, 7), h(kN * kF), dh = random_array(kN * kF, 8), dgu(kN * 2 * kF);
  row("swiglu_forward", time_ms([&] { swiglu_forward(h.data(), gu.data(), kN, kF); }), 3 * f4 * kN * kF, 0);
  row("swiglu_backward", time_ms([&] { swiglu_backward(dgu.data(), dh.data(), gu.data(), kN, kF); }),
      5 * f4 * kN * kF, 0);
}

void bench_loss_and_optimizer() {
  const double f4 = 4.0;
  Array<float> logits = random_array(kN * kV, 9), losses(kN), lse(kN);
  std::vector<int32_t> ht(kN);
  for (int64_t i = 0; i < kN; ++i)
    ht[static_cast<size_t>(i)] = static_cast<int32_t>((i * 31) % kV);
  Array<int32_t> targets(ht);
  row("cross_entropy_forward", time_ms([&] {
        cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), kN, kV, -100);
      }),
      f4 * kN * kV, 0);
  row("cross_entropy_backward (in place)", time_ms([&] {
        cross_entropy_backward(logits.data(), logits.data(), lse.data(), targets.data(), 1e-4f, kN, kV, -100);
      }),
      2 * f4 * kN * kV, 0);
  const int64_t n = 256LL << 20;  // 256 Mi parameters: 1 GiB per buffer
  Array<float> p = random_array(n, 10), g = random_array(n, 11), m(std::vector<float>(n, 0.0f)),
               v(std::vector<float>(n, 0.0f));
  int64_t t = 0;
  row("adamw_update (256M params)", time_ms([&] {
        adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-4, 0.9, 0.95, 1e-8, 0.1, ++t);
      }),
      7 * f4 * n, 0);
}

void bench_attention() {
  const AttentionDims d{kB, kT, kT, kH, kKV, kD, kH * kD, kKV * kD, kH * kD};
  Array<float> q = random_array(kN * kC, 12), k = random_array(kN * kKV * kD, 13),
               v = random_array(kN * kKV * kD, 14);
  Array<float> out(kN * kC), lse(kB * kH * kT), dout = random_array(kN * kC, 15), dq(kN * kC),
                                                dk(kN * kKV * kD), dv(kN * kKV * kD);
  std::vector<int32_t> hp(kN);
  for (int64_t i = 0; i < kN; ++i)
    hp[static_cast<size_t>(i)] = static_cast<int32_t>(i % kT);
  Array<int32_t> pos(hp);
  // Causal: half of the T×T scores; forward 2 GEMM-like products (QKᵀ, PV),
  // backward 5 (QKᵀ again, dP = dO·Vᵀ, dV, dQ, dK).
  const double half_scores = static_cast<double>(kB) * kH * kT * kT / 2.0;
  const double fwd_flop = 2.0 * 2.0 * half_scores * kD, bwd_flop = 2.5 * fwd_flop;
  row("attention_forward (causal)", time_ms([&] {
        mt::cuda::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), pos.data(),
                                    pos.data(), d);
      }),
      0, fwd_flop);
  row("attention_backward (causal)", time_ms([&] {
        mt::cuda::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(),
                                     q.data(), k.data(), v.data(), pos.data(), pos.data(), d);
      }),
      0, bwd_flop);
  // The bf16 tensor-core path on the same data rounded to bf16 (its FLOPs are
  // counted the same way, so the rates compare directly).
  Array<bf16> qh(kN * kC), kh(kN * kKV * kD), vh(kN * kKV * kD), douth(kN * kC);
  f32_to_bf16(qh.data(), q.data(), kN * kC);
  f32_to_bf16(kh.data(), k.data(), kN * kKV * kD);
  f32_to_bf16(vh.data(), v.data(), kN * kKV * kD);
  f32_to_bf16(douth.data(), dout.data(), kN * kC);
  row("attention_forward_bf16 (causal)", time_ms([&] {
        attention_forward_bf16(out.data(), lse.data(), qh.data(), kh.data(), vh.data(), pos.data(),
                               pos.data(), d);
      }),
      0, fwd_flop);
  row("attention_backward_bf16 (causal)", time_ms([&] {
        attention_backward_bf16(dq.data(), dk.data(), dv.data(), douth.data(), out.data(), lse.data(),
                                qh.data(), kh.data(), vh.data(), pos.data(), pos.data(), d);
      }),
      0, bwd_flop);
}

}  // namespace
}  // namespace mt::cuda

int main(int argc, char** argv) {
  using namespace mt::cuda;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--quick") == 0) g_reps = 3;
  if (device_count() == 0) {
    std::printf("no CUDA device: skipped\n");
    return 0;
  }
  try {
    std::printf("device: %s\n", device_description().c_str());
    bench_gemms();
    std::printf("\n== kernels at B=%lld T=%lld d=%lld H=%lld KV=%lld ffn=%lld V=%lld (median of %d)\n",
                static_cast<long long>(kB), static_cast<long long>(kT), static_cast<long long>(kC),
                static_cast<long long>(kH), static_cast<long long>(kKV), static_cast<long long>(kF),
                static_cast<long long>(kV), g_reps);
    std::printf("%-34s %10s %10s %10s\n", "kernel", "ms", "GB/s", "TFLOP/s");
    bench_rowwise();
    bench_loss_and_optimizer();
    bench_attention();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
