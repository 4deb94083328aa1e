// Reruns are bitwise: the kernels with reductions (attention forward and
// backward, RMSNorm's weight gradient, embedding's with repeated ids,
// cross-entropy) and a cuBLAS GEMM, each run twice on the same inputs at sizes
// that use many blocks.
#include <gtest/gtest.h>

#include <cstring>

#include "cuda/gemm.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"

namespace mt::testing {
namespace {

using cuda::Array;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs every kernel once from fixed inputs; returns all outputs concatenated.
std::vector<float> run_all() {
  const int64_t B = 2, T = 300, H = 8, KV = 2, D = 64, N = B * T, C = H * D, V = 517;
  const AttentionDims d{B, T, T, H, KV, D, C, KV * D, C};
  std::vector<int32_t> pos(N);
  for (int64_t i = 0; i < N; ++i)
    pos[i] = static_cast<int32_t>(i % T);
  Array<float> q(uniform(N * C, 51)), k(uniform(N * KV * D, 52)), v(uniform(N * KV * D, 53)),
      dout(uniform(N * C, 54));
  Array<float> out(N * C), lse(B * H * T), dq(std::vector<float>(N * C, 0.0f)),
      dk(std::vector<float>(N * KV * D, 0.0f)), dv(std::vector<float>(N * KV * D, 0.0f));
  Array<int32_t> p(pos);
  cuda::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), p.data(), p.data(), d);
  cuda::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(),
                           k.data(), v.data(), p.data(), p.data(), d);
  Array<float> w(uniform(C, 55)), y(N * C), rstd(N), dx(N * C), dw(std::vector<float>(C, 0.0f));
  cuda::rmsnorm_forward(y.data(), rstd.data(), q.data(), w.data(), N, C, 1e-5f);
  cuda::rmsnorm_backward(dx.data(), dw.data(), dout.data(), q.data(), w.data(), rstd.data(), N, C);
  Array<int32_t> ids(ints(N, 56, 0, 9));  // ten ids: long runs of repeats
  Array<float> dtable(std::vector<float>(10 * C, 0.0f));
  cuda::embedding_backward(dtable.data(), dout.data(), ids.data(), N, C);
  Array<float> logits(uniform(N * V, 57, -5.0f, 5.0f)), losses(N), clse(N);
  Array<int32_t> targets(ints(N, 58, 0, V - 1));
  cuda::cross_entropy_forward(losses.data(), clse.data(), logits.data(), targets.data(), N, V, -100);
  cuda::Blas blas;
  Array<float> g(C * C);
  cuda::sgemm(blas, Trans::yes, Trans::no, C, C, N, dout.data(), C, q.data(), C, g.data(), C, Out::assign);
  std::vector<float> all;
  for (const Array<float>* a : {&out, &lse, &dq, &dk, &dv, &dx, &dw, &dtable, &losses, &clse, &g}) {
    const auto h = a->download();
    all.insert(all.end(), h.begin(), h.end());
  }
  return all;
}

TEST(CudaDeterminism, TwoRunsAreBitwiseEqual) {
  const auto a = run_all(), b = run_all();
  const bool same = same_bits(a, b);
  report("determinism", "rerun_bitwise", same ? 0.0 : 1.0, 0.0);
  EXPECT_TRUE(same);
}

}  // namespace
}  // namespace mt::testing
