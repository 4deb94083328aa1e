// Embedding, RMSNorm, RoPE, SwiGLU, cross-entropy and AdamW on the GPU against
// the double references of ops/reference.h, at awkward sizes (nothing a
// multiple of 32), outputs poisoned with NaN first.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "ops/reference.h"

namespace mt::testing {
namespace {

using cuda::Array;

TEST(CudaOps, Embedding) {
  const int64_t N = 203, C = 75, V = 37;  // V < N: ids repeat
  const auto table = uniform(V * C, 1), dout = uniform(N * C, 2), dtable0 = uniform(V * C, 3);
  const auto ids = ints(N, 4, 0, V - 1);
  Array<float> d_table(table), d_out = poisoned(N * C), d_dout(dout), d_dtable(dtable0);
  Array<int32_t> d_ids(ids);
  cuda::embedding_forward(d_out.data(), d_ids.data(), d_table.data(), N, C);
  cuda::embedding_backward(d_dtable.data(), d_dout.data(), d_ids.data(), N, C);
  std::vector<double> out(N * C), dtable = to_double(dtable0);
  ref::embedding_forward(out.data(), ids.data(), to_double(table).data(), N, C);
  ref::embedding_backward(dtable.data(), to_double(dout).data(), ids.data(), N, C);
  expect_close("embedding", "out", d_out.download(), out);
  expect_close("embedding", "dtable", d_dtable.download(), dtable);
}

TEST(CudaOps, RmsNorm) {
  const int64_t N = 131, C = 333;  // N > 64: several row chunks for dweight
  const float eps = 1e-5f;
  const auto x = uniform(N * C, 5), w = uniform(C, 6, 0.5f, 1.5f), dy = uniform(N * C, 7),
             dw0 = uniform(C, 8);
  Array<float> d_x(x), d_w(w), d_dy(dy), d_dw(dw0), d_out = poisoned(N * C), d_rstd = poisoned(N),
                                                    d_dx = poisoned(N * C);
  cuda::rmsnorm_forward(d_out.data(), d_rstd.data(), d_x.data(), d_w.data(), N, C, eps);
  cuda::rmsnorm_backward(d_dx.data(), d_dw.data(), d_dy.data(), d_x.data(), d_w.data(), d_rstd.data(), N, C);
  std::vector<double> out(N * C), rstd(N), dx(N * C), dw = to_double(dw0);
  const auto xd = to_double(x), wd = to_double(w);
  ref::rmsnorm_forward(out.data(), rstd.data(), xd.data(), wd.data(), N, C, eps);
  ref::rmsnorm_backward(dx.data(), dw.data(), to_double(dy).data(), xd.data(), wd.data(), rstd.data(), N, C);
  expect_close("rmsnorm", "out", d_out.download(), out);
  expect_close("rmsnorm", "rstd", d_rstd.download(), rstd);
  expect_close("rmsnorm", "dinp", d_dx.download(), dx);
  expect_close("rmsnorm", "dweight", d_dw.download(), dw);
}

TEST(CudaOps, Rope) {
  // Rows hold 3 heads of 22 plus 5 columns the rotation must leave alone.
  const int64_t N = 53, H = 3, D = 22, stride = H * D + 5, max_pos = 300;
  const double theta = 10000.0;
  const auto x = uniform(N * stride, 9);
  const auto pos = ints(N, 10, 0, max_pos - 1);
  Array<float> d_cos(max_pos * D / 2), d_sin(max_pos * D / 2), d_x(x), d_g(x);
  Array<int32_t> d_pos(pos);
  cuda::rope_table_fill(d_cos.data(), d_sin.data(), max_pos, D, theta);
  const cuda::RopeTableView t{d_cos.data(), d_sin.data(), max_pos, D};
  cuda::rope_forward(d_x.data(), d_pos.data(), t, N, H, stride);
  cuda::rope_backward(d_g.data(), d_pos.data(), t, N, H, stride);
  auto fwd = to_double(x), bwd = to_double(x);
  ref::rope_forward(fwd.data(), pos.data(), N, H, D, stride, theta);
  ref::rope_backward(bwd.data(), pos.data(), N, H, D, stride, theta);
  expect_close("rope", "forward", d_x.download(), fwd);
  expect_close("rope", "backward", d_g.download(), bwd);
}

TEST(CudaOps, SwiGlu) {
  const int64_t N = 37, F = 101;
  const auto gu = uniform(N * 2 * F, 11, -4.0f, 4.0f), dy = uniform(N * F, 12);
  Array<float> d_gu(gu), d_dy(dy), d_out = poisoned(N * F), d_dgu = poisoned(N * 2 * F);
  cuda::swiglu_forward(d_out.data(), d_gu.data(), N, F);
  cuda::swiglu_backward(d_dgu.data(), d_dy.data(), d_gu.data(), N, F);
  std::vector<double> out(N * F), dgu(N * 2 * F);
  ref::swiglu_forward(out.data(), to_double(gu).data(), N, F);
  ref::swiglu_backward(dgu.data(), to_double(dy).data(), to_double(gu).data(), N, F);
  expect_close("swiglu", "out", d_out.download(), out);
  expect_close("swiglu", "dgu", d_dgu.download(), dgu);
}

TEST(CudaOps, CrossEntropyWithIgnoredTargets) {
  const int64_t N = 45, V = 1001;
  const int32_t ignore = -100;
  const auto logits = uniform(N * V, 13, -6.0f, 6.0f);
  auto targets = ints(N, 14, 0, V - 1);
  for (int64_t n = 0; n < N; n += 4)
    targets[n] = ignore;
  const float dloss = 1.0f / 34.0f;
  Array<float> d_logits(logits), d_loss = poisoned(N), d_lse = poisoned(N), d_dlogits = poisoned(N * V);
  Array<int32_t> d_t(targets);
  cuda::cross_entropy_forward(d_loss.data(), d_lse.data(), d_logits.data(), d_t.data(), N, V, ignore);
  cuda::cross_entropy_backward(d_dlogits.data(), d_logits.data(), d_lse.data(), d_t.data(), dloss, N, V,
                               ignore);
  std::vector<double> loss(N), lse(N), dlogits(N * V);
  const auto ld = to_double(logits);
  ref::cross_entropy_forward(loss.data(), lse.data(), ld.data(), targets.data(), N, V, ignore);
  ref::cross_entropy_backward(dlogits.data(), ld.data(), lse.data(), targets.data(), dloss, N, V, ignore);
  expect_close("cross_entropy", "losses", d_loss.download(), loss);
  expect_close("cross_entropy", "lse", d_lse.download(), lse);
  expect_close("cross_entropy", "dlogits", d_dlogits.download(), dlogits);
  // In place, as the CPU kernel allows.
  cuda::cross_entropy_backward(d_logits.data(), d_logits.data(), d_lse.data(), d_t.data(), dloss, N, V,
                               ignore);
  expect_close("cross_entropy", "dlogits_in_place", d_logits.download(), dlogits);
}

TEST(CudaOps, AdamW) {
  const int64_t n = 1037, t = 3;
  const double lr = 0.05, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  const auto p0 = uniform(n, 15), g = uniform(n, 16), m0 = uniform(n, 17, -0.1f, 0.1f),
             v0 = uniform(n, 18, 0.0f, 0.01f);
  Array<float> d_p(p0), d_g(g), d_m(m0), d_v(v0);
  cuda::adamw_update(d_p.data(), d_g.data(), d_m.data(), d_v.data(), n, lr, b1, b2, eps, wd, t);
  // Double reference, written from the formula in optim/adamw.h.
  std::vector<double> p(n), m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * m0[i] + (1 - b1) * g[i];
    v[i] = b2 * v0[i] + (1 - b2) * double{g[i]} * g[i];
    const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
    p[i] = p0[i] - lr * (mh / (std::sqrt(vh) + eps) + wd * p0[i]);
  }
  const auto got = d_p.download();
  expect_close("adamw", "params", got, p);
  // The step itself (p − p0), so that its error is not hidden under |p|.
  std::vector<float> step(n);
  std::vector<double> step_ref(n);
  for (int64_t i = 0; i < n; ++i) {
    step[i] = got[i] - p0[i];
    step_ref[i] = p[i] - p0[i];
  }
  expect_close("adamw", "step", step, step_ref);
  expect_close("adamw", "m", d_m.download(), m);
  expect_close("adamw", "v", d_v.download(), v);
}

}  // namespace
}  // namespace mt::testing
