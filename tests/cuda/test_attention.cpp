// Attention on the GPU against ops/attention_reference.h: GQA ratios 2 and 4,
// T not a multiple of the 32-key tile, padded row strides, and context-parallel
// positions (Tq ≠ Tk, queries that see no key).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "ops/attention_reference.h"

namespace mt::testing {
namespace {

using cuda::Array;

struct Case {
  AttentionDims d;
  std::vector<int32_t> q_pos, k_pos;  // [B, Tq], [B, Tk]
};

Case make_case(int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D, int32_t q0,
               int32_t q_step, int32_t k0) {
  Case c;
  c.d = {B, Tq, Tk, H, KV, D, H * D + 7, KV * D + 3, H * D + 5};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < Tq; ++i)
      c.q_pos.push_back(static_cast<int32_t>(q0 + q_step * i));
    for (int64_t j = 0; j < Tk; ++j)
      c.k_pos.push_back(static_cast<int32_t>(k0 + j));
  }
  return c;
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

void check_case(const Case& c, const std::string& name) {
  const AttentionDims& d = c.d;
  const int64_t nq = d.batch * d.q_len * d.q_stride, nkv = d.batch * d.kv_len * d.kv_stride;
  const int64_t no = d.batch * d.q_len * d.out_stride, nl = d.batch * d.n_heads * d.q_len;
  const auto q = uniform(nq, 21, -2.0f, 2.0f), k = uniform(nkv, 22, -2.0f, 2.0f), v = uniform(nkv, 23);
  const auto dout = uniform(no, 24), dq0 = uniform(nq, 25), dk0 = uniform(nkv, 26), dv0 = uniform(nkv, 27);
  Array<float> d_q(q), d_k(k), d_v(v), d_dout(dout), d_dq(dq0), d_dk(dk0), d_dv(dv0);
  Array<float> d_out = poisoned(no), d_lse = poisoned(nl);
  Array<int32_t> d_qp(c.q_pos), d_kp(c.k_pos);
  cuda::attention_forward(d_out.data(), d_lse.data(), d_q.data(), d_k.data(), d_v.data(), d_qp.data(),
                          d_kp.data(), d);
  cuda::attention_backward(d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_out.data(), d_lse.data(),
                           d_q.data(), d_k.data(), d_v.data(), d_qp.data(), d_kp.data(), d);
  std::vector<double> out(no, 0.0), lse(nl), dq = to_double(dq0), dk = to_double(dk0), dv = to_double(dv0);
  const auto qd = to_double(q), kd = to_double(k), vd = to_double(v);
  ref::attention_forward(out.data(), lse.data(), qd.data(), kd.data(), vd.data(), c.q_pos.data(),
                         c.k_pos.data(), d);
  ref::attention_backward(dq.data(), dk.data(), dv.data(), to_double(dout).data(), out.data(), lse.data(),
                          qd.data(), kd.data(), vd.data(), c.q_pos.data(), c.k_pos.data(), d);
  expect_close("attention", name + ".out", heads_of(d_out.download(), d), heads_of(out, d));
  expect_close("attention", name + ".lse", d_lse.download(), lse);
  expect_close("attention", name + ".dq", d_dq.download(), dq);
  expect_close("attention", name + ".dk", d_dk.download(), dk);
  expect_close("attention", name + ".dv", d_dv.download(), dv);
}

TEST(CudaAttention, CausalGqa2) {
  check_case(make_case(2, 77, 77, 4, 2, 40, 0, 1, 0), "causal_gqa2_d40");
}

TEST(CudaAttention, CausalGqa4HeadDim128) {
  check_case(make_case(2, 45, 45, 8, 2, 128, 0, 1, 0), "causal_gqa4_d128");
}

TEST(CudaAttention, ContextParallelPositions) {
  // Queries at 3, 5, 7, ... against keys at 8 .. 77: the first three queries
  // see no key (out = 0, lse = −inf); later ones see all keys of the block.
  check_case(make_case(1, 45, 70, 4, 1, 24, 3, 2, 8), "cp_positions_gqa4_d24");
}

TEST(CudaAttention, KvCacheSingleQuery) {
  // One new token at position 66 against 67 cached keys (decoding).
  check_case(make_case(3, 1, 67, 4, 2, 64, 66, 1, 0), "kv_cache_decode_d64");
}

TEST(CudaAttention, MergeOfTwoKeyBlocksEqualsTheWhole) {
  Case whole = make_case(1, 50, 70, 4, 2, 40, 20, 1, 0);
  const AttentionDims& d = whole.d;
  AttentionDims first = d, second = d;
  first.kv_len = 33;  // keys 0..32, the rest 33..69
  second.kv_len = d.kv_len - first.kv_len;
  const int64_t no = d.q_len * d.out_stride, nl = d.n_heads * d.q_len;
  const auto q = uniform(d.q_len * d.q_stride, 31), k = uniform(d.kv_len * d.kv_stride, 32),
             v = uniform(d.kv_len * d.kv_stride, 33);
  Array<float> d_q(q), d_k(k), d_v(v), o1 = poisoned(no), l1 = poisoned(nl), o2 = poisoned(no),
                                       l2 = poisoned(nl);
  Array<int32_t> d_qp(whole.q_pos), d_kp(whole.k_pos);
  cuda::attention_forward(o1.data(), l1.data(), d_q.data(), d_k.data(), d_v.data(), d_qp.data(), d_kp.data(),
                          first);
  const int64_t off = first.kv_len * d.kv_stride;
  cuda::attention_forward(o2.data(), l2.data(), d_q.data(), d_k.data() + off, d_v.data() + off, d_qp.data(),
                          d_kp.data() + first.kv_len, second);
  cuda::attention_merge(o1.data(), l1.data(), o2.data(), l2.data(), d);
  std::vector<double> out(no, 0.0), lse(nl);
  ref::attention_forward(out.data(), lse.data(), to_double(q).data(), to_double(k).data(),
                         to_double(v).data(), whole.q_pos.data(), whole.k_pos.data(), d);
  expect_close("attention", "merge.out", heads_of(o1.download(), d), heads_of(out, d));
  expect_close("attention", "merge.lse", l1.download(), lse);
}

TEST(CudaAttention, RefusesHeadDimOver128) {
  Case c = make_case(1, 4, 4, 2, 1, 136, 0, 1, 0);
  EXPECT_THROW(cuda::attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, c.d),
               ConfigError);
}

}  // namespace
}  // namespace mt::testing
