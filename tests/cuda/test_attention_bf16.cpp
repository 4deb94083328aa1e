// bf16 tensor-core attention (cuda/ops.h attention_forward_bf16 and
// attention_backward_bf16) against ops/attention_reference.h in double, twice:
//  - on the bf16-rounded inputs: the kernels differ only by rounding P (forward,
//    dV) and dS (dQ, dK) to bf16 before their products, plus fp32 arithmetic.
//    A rounding to bf16 has relative error ≤ u = 2⁻⁸ and, on values spread over
//    the binade, an rms of ≈ 0.42·u ≈ 1.7e-3, uncorrelated with the data; with
//    zero-mean values that rms is the expected relative L2 error of out and dV.
//    Bounds: out, dV: u; dQ, dK: 2u (dS rounding, plus delta = ⟨dout, out⟩
//    taken from the kernel's own out); lse: 1e-5 (fp32 only; the bf16 products
//    are exact in fp32).
//  - on the fp32 inputs (what the rounding of q, k, v, dout costs on top):
//    scores move by ≈ √2·(4/3)·1.7e-3 ≈ 3e-3 for q, k in [−2, 2], so 4u for out
//    and the gradients, u for lse.
// Shapes: T = 77 and 200 (not multiples of the 64-row tiles), head_dim 64 and
// 128, GQA 2 and 4, padded (odd) strides and aligned ones (the two load paths),
// context-parallel positions with queries that see no key, one decode query.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "ops/attention_reference.h"

namespace mt::testing {
namespace {

using cuda::Array;

constexpr double kU = 1.0 / 256.0;  // bf16 unit roundoff, 2⁻⁸

struct Case {
  AttentionDims d;
  std::vector<int32_t> q_pos, k_pos;  // [B, Tq], [B, Tk]
  bool accumulate = false;            // dq, dk, dv start random (tests +=) instead of 0
};

// padded: row strides wider than the heads and odd (element-wise loads);
// otherwise multiples of 8 (16-byte loads).
Case make_case(int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D, int32_t q0,
               int32_t q_step, int32_t k0, bool padded) {
  Case c;
  c.d = padded ? AttentionDims{B, Tq, Tk, H, KV, D, H * D + 7, KV * D + 3, H * D + 5}
               : AttentionDims{B, Tq, Tk, H, KV, D, H * D, KV * D, H * D};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < Tq; ++i)
      c.q_pos.push_back(static_cast<int32_t>(q0 + q_step * i));
    for (int64_t j = 0; j < Tk; ++j)
      c.k_pos.push_back(static_cast<int32_t>(k0 + j));
  }
  return c;
}

// One input: the fp32 values, their bf16 rounding, and both in double.
struct Input {
  std::vector<bf16> h;
  std::vector<double> rounded, exact;
};

Input make_input(int64_t n, uint32_t seed, float lo, float hi) {
  Input in;
  for (float x : uniform(static_cast<size_t>(n), seed, lo, hi)) {
    in.h.push_back(float_to_bf16(x));
    in.rounded.push_back(bf16_to_float(in.h.back()));
    in.exact.push_back(x);
  }
  return in;
}

struct Result {
  std::vector<double> out, lse, dq, dk, dv;
};

Result reference(const Case& c, const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, const std::vector<double>& dout, const Result& init) {
  const AttentionDims& d = c.d;
  Result r = init;
  r.out.assign(static_cast<size_t>(d.batch * d.q_len * d.out_stride), 0.0);
  r.lse.assign(static_cast<size_t>(d.batch * d.n_heads * d.q_len), 0.0);
  ref::attention_forward(r.out.data(), r.lse.data(), q.data(), k.data(), v.data(), c.q_pos.data(),
                         c.k_pos.data(), d);
  ref::attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), r.out.data(), r.lse.data(),
                          q.data(), k.data(), v.data(), c.q_pos.data(), c.k_pos.data(), d);
  return r;
}

// The head columns of out-shaped buffers (the stride padding is not output).
template <typename T>
std::vector<T> heads_of(const std::vector<T>& x, const AttentionDims& d) {
  std::vector<T> r;
  for (int64_t row = 0; row < d.batch * d.q_len; ++row)
    for (int64_t c = 0; c < d.n_heads * d.head_dim; ++c)
      r.push_back(x[static_cast<size_t>(row * d.out_stride + c)]);
  return r;
}

void compare(const std::string& name, const Result& got, const std::vector<float>& got_out, const Result& ref,
             const AttentionDims& d, double tol_out, double tol_lse, double tol_dqk, double tol_dv) {
  const auto f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  expect_close("attention_bf16", name + ".out", heads_of(got_out, d), heads_of(ref.out, d), tol_out);
  expect_close("attention_bf16", name + ".lse", f(got.lse), ref.lse, tol_lse);
  expect_close("attention_bf16", name + ".dq", f(got.dq), ref.dq, tol_dqk);
  expect_close("attention_bf16", name + ".dk", f(got.dk), ref.dk, tol_dqk);
  expect_close("attention_bf16", name + ".dv", f(got.dv), ref.dv, tol_dv);
}

std::vector<double> initial(int64_t n, uint32_t seed, bool random) {
  return random ? to_double(uniform(static_cast<size_t>(n), seed))
                : std::vector<double>(static_cast<size_t>(n));
}

void check_case(const Case& c, const std::string& name) {
  const AttentionDims& d = c.d;
  const int64_t nq = d.batch * d.q_len * d.q_stride, nkv = d.batch * d.kv_len * d.kv_stride;
  const int64_t no = d.batch * d.q_len * d.out_stride, nl = d.batch * d.n_heads * d.q_len;
  const Input q = make_input(nq, 61, -2.0f, 2.0f), k = make_input(nkv, 62, -2.0f, 2.0f),
              v = make_input(nkv, 63, -1.0f, 1.0f), dout = make_input(no, 64, -1.0f, 1.0f);
  Result init;
  init.dq = initial(nq, 65, c.accumulate);
  init.dk = initial(nkv, 66, c.accumulate);
  init.dv = initial(nkv, 67, c.accumulate);
  const auto f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  Array<bf16> d_q(q.h), d_k(k.h), d_v(v.h), d_dout(dout.h);
  Array<float> d_out = poisoned(no), d_lse = poisoned(nl), d_dq(f(init.dq)), d_dk(f(init.dk)),
               d_dv(f(init.dv));
  Array<int32_t> d_qp(c.q_pos), d_kp(c.k_pos);
  cuda::attention_forward_bf16(d_out.data(), d_lse.data(), d_q.data(), d_k.data(), d_v.data(), d_qp.data(),
                               d_kp.data(), d);
  cuda::attention_backward_bf16(d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_out.data(),
                                d_lse.data(), d_q.data(), d_k.data(), d_v.data(), d_qp.data(), d_kp.data(),
                                d);
  Result got;
  const auto out = d_out.download();
  got.lse = to_double(d_lse.download());
  got.dq = to_double(d_dq.download());
  got.dk = to_double(d_dk.download());
  got.dv = to_double(d_dv.download());
  compare(name, got, out, reference(c, q.rounded, k.rounded, v.rounded, dout.rounded, init), d, kU, kFp32Tol,
          2 * kU, kU);
  compare(name + ".vs_fp32", got, out, reference(c, q.exact, k.exact, v.exact, dout.exact, init), d, 4 * kU,
          kU, 4 * kU, 4 * kU);
}

TEST(CudaAttentionBf16, CausalT77Gqa2HeadDim64Padded) {
  Case c = make_case(2, 77, 77, 4, 2, 64, 0, 1, 0, true);
  c.accumulate = true;
  check_case(c, "causal_t77_gqa2_d64_padded");
}

TEST(CudaAttentionBf16, CausalT200Gqa4HeadDim128) {
  check_case(make_case(1, 200, 200, 8, 2, 128, 0, 1, 0, false), "causal_t200_gqa4_d128");
}

TEST(CudaAttentionBf16, CausalT200Gqa2HeadDim64) {
  check_case(make_case(2, 200, 200, 4, 2, 64, 0, 1, 0, false), "causal_t200_gqa2_d64");
}

TEST(CudaAttentionBf16, CausalT77Gqa4HeadDim128Padded) {
  check_case(make_case(1, 77, 77, 8, 2, 128, 0, 1, 0, true), "causal_t77_gqa4_d128_padded");
}

TEST(CudaAttentionBf16, ContextParallelPositions) {
  // Queries at 3, 5, 7, ... against keys at 8 .. 77: the first three queries
  // see no key (out = 0, lse = −inf, no gradient); later ones see the whole block.
  check_case(make_case(1, 45, 70, 4, 1, 64, 3, 2, 8, true), "cp_positions_gqa4_d64");
  check_case(make_case(2, 130, 77, 4, 2, 128, 40, 1, 60, false), "cp_positions_gqa2_d128");
}

TEST(CudaAttentionBf16, KvCacheSingleQuery) {
  // One new token at position 66 against 67 cached keys (decoding).
  check_case(make_case(3, 1, 67, 4, 2, 128, 66, 1, 0, true), "kv_cache_decode_d128");
  check_case(make_case(2, 1, 200, 8, 2, 64, 199, 1, 0, false), "kv_cache_decode_d64");
}

TEST(CudaAttentionBf16, MergeOfTwoKeyBlocksEqualsTheWhole) {
  // Context parallelism: keys 0..32 and 33..69 attended separately, then
  // merged by the fp32 attention_merge; queries 20..32 see no key of the second.
  const Case whole = make_case(1, 50, 70, 4, 2, 64, 20, 1, 0, false);
  const AttentionDims& d = whole.d;
  AttentionDims first = d, second = d;
  first.kv_len = 33;
  second.kv_len = d.kv_len - first.kv_len;
  const int64_t no = d.q_len * d.out_stride, nl = d.n_heads * d.q_len;
  const Input q = make_input(d.q_len * d.q_stride, 71, -2.0f, 2.0f),
              k = make_input(d.kv_len * d.kv_stride, 72, -2.0f, 2.0f),
              v = make_input(d.kv_len * d.kv_stride, 73, -1.0f, 1.0f);
  Array<bf16> d_q(q.h), d_k(k.h), d_v(v.h);
  Array<float> o1 = poisoned(no), l1 = poisoned(nl), o2 = poisoned(no), l2 = poisoned(nl);
  Array<int32_t> d_qp(whole.q_pos), d_kp(whole.k_pos);
  cuda::attention_forward_bf16(o1.data(), l1.data(), d_q.data(), d_k.data(), d_v.data(), d_qp.data(),
                               d_kp.data(), first);
  const int64_t off = first.kv_len * d.kv_stride;
  cuda::attention_forward_bf16(o2.data(), l2.data(), d_q.data(), d_k.data() + off, d_v.data() + off,
                               d_qp.data(), d_kp.data() + first.kv_len, second);
  cuda::attention_merge(o1.data(), l1.data(), o2.data(), l2.data(), d);
  std::vector<double> out(static_cast<size_t>(no), 0.0), lse(static_cast<size_t>(nl));
  ref::attention_forward(out.data(), lse.data(), q.rounded.data(), k.rounded.data(), v.rounded.data(),
                         whole.q_pos.data(), whole.k_pos.data(), d);
  expect_close("attention_bf16", "merge.out", heads_of(o1.download(), d), heads_of(out, d), kU);
  expect_close("attention_bf16", "merge.lse", l1.download(), lse, kFp32Tol);
}

// Forward and backward from fixed inputs; all outputs concatenated.
std::vector<float> run_once(const Case& c) {
  const AttentionDims& d = c.d;
  const int64_t nq = d.batch * d.q_len * d.q_stride, nkv = d.batch * d.kv_len * d.kv_stride;
  const int64_t no = d.batch * d.q_len * d.out_stride;
  Array<bf16> q(make_input(nq, 81, -2.0f, 2.0f).h), k(make_input(nkv, 82, -2.0f, 2.0f).h),
      v(make_input(nkv, 83, -1.0f, 1.0f).h), dout(make_input(no, 84, -1.0f, 1.0f).h);
  Array<float> out(std::vector<float>(static_cast<size_t>(no), 0.0f)), lse(d.batch * d.n_heads * d.q_len),
      dq(std::vector<float>(static_cast<size_t>(nq), 0.0f)),
      dk(std::vector<float>(static_cast<size_t>(nkv), 0.0f)),
      dv(std::vector<float>(static_cast<size_t>(nkv), 0.0f));
  Array<int32_t> qp(c.q_pos), kp(c.k_pos);
  cuda::attention_forward_bf16(out.data(), lse.data(), q.data(), k.data(), v.data(), qp.data(), kp.data(), d);
  cuda::attention_backward_bf16(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(),
                                q.data(), k.data(), v.data(), qp.data(), kp.data(), d);
  std::vector<float> all;
  for (const Array<float>* a : {&out, &lse, &dq, &dk, &dv}) {
    const auto h = a->download();
    all.insert(all.end(), h.begin(), h.end());
  }
  return all;
}

TEST(CudaAttentionBf16, TwoRunsAreBitwiseEqual) {
  bool same = true;
  for (const Case& c :
       {make_case(2, 300, 300, 8, 2, 128, 0, 1, 0, false), make_case(2, 300, 300, 8, 4, 64, 0, 1, 0, true)}) {
    const auto a = run_once(c), b = run_once(c);
    same = same && a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }
  report("attention_bf16", "rerun_bitwise", same ? 0.0 : 1.0, 0.0);
  EXPECT_TRUE(same);
}

TEST(CudaAttentionBf16, RefusesHeadDimOtherThan64Or128) {
  for (int64_t D : {32, 96, 136}) {
    const Case c = make_case(1, 4, 4, 2, 1, D, 0, 1, 0, false);
    EXPECT_THROW(
        cuda::attention_forward_bf16(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, c.d),
        ConfigError);
    EXPECT_THROW(cuda::attention_backward_bf16(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                               nullptr, nullptr, nullptr, nullptr, c.d),
                 ConfigError);
  }
}

}  // namespace
}  // namespace mt::testing
