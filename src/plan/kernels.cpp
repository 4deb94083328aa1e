#include "plan/kernels.h"

#include <algorithm>
#include <vector>

#include "ops/attention.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace mt::plan {

LayerKernels measure_layer_kernels(
    const ModelConfig& m, int64_t batch, int64_t seq_len,
    const std::function<double(const std::function<void()>&)>& seconds_per_call) {
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
  const RopeTable table = m.rope_table(seq_len);
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
  k.attention_s = seconds_per_call([&] {
    attention_forward(out.data(), lse.data(), q.data(), kp, vp, pos.data(), pos.data(), d);
    attention_backward(dq.data(), dq.data() + m.q_dim(), dq.data() + m.q_dim() + m.kv_dim(), dout.data(),
                       out.data(), lse.data(), q.data(), kp, vp, pos.data(), pos.data(), d);
  });
  return k;
}

}  // namespace mt::plan
