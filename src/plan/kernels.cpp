#include "plan/kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/timer.h"
#include "ops/attention.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "optim/adamw.h"
#include "optim/clip.h"

namespace mt::plan {

LayerKernels measure_layer_kernels(const ModelConfig& m, int64_t batch, int64_t seq_len,
                                   const NodeSeconds& seconds_per_call) {
  const int64_t N = batch * seq_len, C = m.d_model, F = m.ffn_hidden, qkv = m.qkv_dim();
  const auto buf = [](int64_t n, float v) { return std::vector<float>(static_cast<size_t>(n), v); };
  std::vector<float> x = buf(N * C, 0.5f), y = buf(N * C, 0), dy = buf(N * C, 0.1f), w = buf(C, 1),
                     dw = buf(C, 0);
  std::vector<float> rstd = buf(N, 0), q = buf(N * qkv, 0.01f), dq = buf(N * qkv, 0);
  std::vector<float> gu = buf(2 * N * F, 0.3f), dgu = buf(2 * N * F, 0), h = buf(N * F, 0),
                     dh = buf(N * F, 0.1f);
  std::vector<float> out = buf(N * m.q_dim(), 0), dout = buf(N * m.q_dim(), 0.1f);
  std::vector<float> lse = buf(batch * m.n_heads * seq_len, 0);
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % seq_len);
  const RopeTable table = m.rope_table(m.rope(), seq_len);
  LayerKernels k;
  k.batch = batch, k.seq_len = seq_len, k.d_model = C, k.ffn_hidden = F, k.heads = m.n_heads;
  k.elementwise_s = seconds_per_call([&] {
    for (int rep = 0; rep < 2; ++rep) {  // the two norms of a layer
      rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
      rmsnorm_backward(x.data(), dw.data(), dy.data(), y.data(), w.data(), rstd.data(), N, C);
    }
    rope_forward(q.data(), pos.data(), table, N, m.n_heads + m.n_kv_heads, qkv);
    rope_backward(q.data(), pos.data(), table, N, m.n_heads + m.n_kv_heads, qkv);
    swiglu_forward(h.data(), gu.data(), N, F);
    swiglu_backward(dgu.data(), dh.data(), gu.data(), N, F);
  });
  AttentionDims d;
  d.batch = batch, d.q_len = d.kv_len = seq_len, d.n_heads = m.n_heads, d.n_kv_heads = m.n_kv_heads;
  d.head_dim = m.head_dim(), d.q_stride = d.kv_stride = qkv, d.out_stride = m.q_dim();
  const float* kp = q.data() + m.q_dim();
  const float* vp = kp + m.kv_dim();
  const auto attention = [&](const AttentionDims& dims) {
    return seconds_per_call([&] {
      attention_forward(out.data(), lse.data(), q.data(), kp, vp, pos.data(), pos.data(), dims);
      attention_backward(dq.data(), dq.data() + m.q_dim(), dq.data() + m.q_dim() + m.kv_dim(), dout.data(),
                         out.data(), lse.data(), q.data(), kp, vp, pos.data(), pos.data(), dims);
    });
  };
  k.attention_s = attention(d);
  // The block a cp 2 ring computes: half the sequence against half, causal.
  AttentionDims half = d;
  half.q_len = half.kv_len = std::max<int64_t>(1, seq_len / 2);
  k.attention_half_s = attention(half);
  return k;
}

double measure_optimizer_pass(int64_t params, const NodeSeconds& seconds_per_call) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(1, params));
  std::vector<float> p(n, 0.5f), g(n, 1e-3f), m(n, 0), v(n, 0);
  int64_t t = 0;
  const double s = seconds_per_call([&] {
    const double norm = std::sqrt(sum_squares(g.data(), int64_t(n)));
    clip_by_norm(g.data(), int64_t(n), norm, 1.0);
    adamw_update(p.data(), g.data(), m.data(), v.data(), int64_t(n), 1e-3, 0.9, 0.95, 1e-8, 0.1, ++t);
  });
  return s / double(n);
}

namespace {

// One GEMM of a layer: C[rows, out] = X[rows, in] · W[out, in]ᵀ.
struct LinearShape {
  int64_t in = 0, out = 0;
};

// Per layer and shape its own input, weight, output and weight gradient; the
// output and input gradients are shared (the step's scratch).
struct LinearBuffers {
  std::vector<float> x, w, y, dw;
};

}  // namespace

std::vector<GemmRate> measure_layer_gemms(const ModelConfig& m, int64_t rows, int64_t tp,
                                          const NodeSeconds& seconds_per_call) {
  const int64_t d = m.d_model, F = m.ffn_hidden;
  const std::vector<LinearShape> shapes{
      {d, m.qkv_dim() / tp}, {m.q_dim() / tp, d}, {d, 2 * F / tp}, {F / tp, d}, {d, m.vocab_size / tp}};
  const size_t head = shapes.size() - 1;
  int64_t layer_floats = 0, widest = 0;
  for (size_t s = 0; s < head; ++s) {
    layer_floats += 2 * (rows + shapes[s].out) * shapes[s].in + rows * shapes[s].out;
    widest = std::max({widest, shapes[s].in, shapes[s].out});
  }
  // The model's layers, as many as 512 MiB hold (at least one).
  const int64_t layers =
      std::clamp<int64_t>((int64_t{128} << 20) / std::max<int64_t>(1, layer_floats), 1, m.n_layers);
  const auto alloc = [](int64_t n, float v) { return std::vector<float>(static_cast<size_t>(n), v); };
  std::vector<LinearBuffers> buf;
  for (int64_t l = 0; l <= layers; ++l)  // the last one: the head
    for (size_t s = (l == layers ? head : 0); s < (l == layers ? head + 1 : head); ++s) {
      const LinearShape& sh = shapes[s];
      buf.push_back({alloc(rows * sh.in, 0.5f), alloc(sh.out * sh.in, 0.01f), alloc(rows * sh.out, 0),
                     alloc(sh.out * sh.in, 0)});
    }
  std::vector<float> dy = alloc(rows * std::max(widest, m.vocab_size / tp), 1e-3f);
  std::vector<float> dx = alloc(rows * std::max(widest, d), 0);
  std::vector<double> seconds(shapes.size(), 0.0);
  const auto shape_of = [&](size_t i) { return i == buf.size() - 1 ? head : i % head; };
  const double node_s = seconds_per_call([&] {
    for (size_t i = 0; i < buf.size(); ++i) {
      const LinearShape& sh = shapes[shape_of(i)];
      Timer t;
      linear_forward(buf[i].y.data(), buf[i].x.data(), buf[i].w.data(), rows, sh.in, sh.out);
      seconds[shape_of(i)] += t.seconds();
    }
    for (size_t i = buf.size(); i-- > 0;) {
      const LinearShape& sh = shapes[shape_of(i)];
      Timer t;
      linear_backward(dx.data(), buf[i].dw.data(), dy.data(), buf[i].x.data(), buf[i].w.data(), rows, sh.in,
                      sh.out);
      seconds[shape_of(i)] += t.seconds();
    }
  });
  double total = 0;
  for (double s : seconds)
    total += s;
  std::vector<GemmRate> rates;
  for (size_t s = 0; s < shapes.size(); ++s) {
    const double calls = s == head ? 1.0 : double(layers);
    const double flops = 6.0 * double(rows) * double(shapes[s].in) * double(shapes[s].out) * calls;
    rates.push_back({rows, shapes[s].out, shapes[s].in, flops / (node_s * seconds[s] / total), 0, 0});
  }
  return rates;
}

}  // namespace mt::plan
