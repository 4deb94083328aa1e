#include "cp_problem.h"

#include <cmath>
#include <limits>

#include "cp_test_util.h"
#include "ops/attention.h"
#include "ops/attention_reference.h"
#include "parallel/cp_ulysses.h"

namespace mt::test {

std::string CpCase::str(int cp) const {
  return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
         " KV=" + std::to_string(KV) + " D=" + std::to_string(D) + " cp=" + std::to_string(cp) +
         (zigzag ? " zigzag" : " contiguous");
}

std::vector<int64_t> local_rows(const CpCase& c, int cp, int rank) {
  const int64_t Tl = c.T / cp;
  std::vector<int64_t> rows(static_cast<size_t>(Tl));
  if (c.zigzag) {
    std::vector<int32_t> pos(static_cast<size_t>(Tl));
    cp::zigzag_positions(pos.data(), c.T, cp, rank);
    for (int64_t i = 0; i < Tl; ++i)
      rows[static_cast<size_t>(i)] = pos[static_cast<size_t>(i)];
  } else {
    for (int64_t i = 0; i < Tl; ++i)
      rows[static_cast<size_t>(i)] = rank * Tl + i;
  }
  return rows;
}

CpErrors run_cp_attention(const CpCase& c, CpVariant variant, Group& cp, std::string_view site) {
  const int P = cp.size(), r = cp.rank();
  const int64_t B = c.B, T = c.T, H = c.H, KV = c.KV, D = c.D, Tl = T / P;
  const int64_t W = (H + 2 * KV) * D, HD = H * D, out_stride = HD + 3;
  const int64_t q_off = 0, k_off = HD, v_off = (H + KV) * D;

  // The whole sequence: fused qkv x [B, T, W], dout [B, T, H·D], positions 0..T−1.
  const std::vector<float> x = random_vec(B * T * W, 11);
  const std::vector<float> dout = random_vec(B * T * HD, 12);
  std::vector<int32_t> pos(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i)
    pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % T);
  AttentionDims full{B, T, T, H, KV, D, W, W, HD};
  const std::vector<double> xd(x.begin(), x.end()), doutd(dout.begin(), dout.end());
  std::vector<double> out_ref(static_cast<size_t>(B * T * HD)), lse_ref(static_cast<size_t>(B * H * T));
  std::vector<double> dx_ref(static_cast<size_t>(B * T * W), 0.0);
  ref::attention_forward(out_ref.data(), lse_ref.data(), xd.data() + q_off, xd.data() + k_off,
                         xd.data() + v_off, pos.data(), pos.data(), full);
  ref::attention_backward(dx_ref.data() + q_off, dx_ref.data() + k_off, dx_ref.data() + v_off, doutd.data(),
                          out_ref.data(), lse_ref.data(), xd.data() + q_off, xd.data() + k_off,
                          xd.data() + v_off, pos.data(), pos.data(), full);

  // This rank's tokens.
  const std::vector<int64_t> rows = local_rows(c, P, r);
  std::vector<float> xl(static_cast<size_t>(B * Tl * W));
  std::vector<float> doutl(static_cast<size_t>(B * Tl * out_stride), 0.0f);
  std::vector<int32_t> posl(static_cast<size_t>(B * Tl));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < Tl; ++i) {
      const int64_t g = b * T + rows[static_cast<size_t>(i)], l = b * Tl + i;
      std::copy(x.begin() + g * W, x.begin() + (g + 1) * W, xl.begin() + l * W);
      std::copy(dout.begin() + g * HD, dout.begin() + (g + 1) * HD, doutl.begin() + l * out_stride);
      posl[static_cast<size_t>(l)] = static_cast<int32_t>(rows[static_cast<size_t>(i)]);
    }
  }
  const AttentionDims d{B, Tl, Tl, H, KV, D, W, W, out_stride};
  constexpr float kPad = 7.25f;
  std::vector<float> out(static_cast<size_t>(B * Tl * out_stride), kPad),
      lse(static_cast<size_t>(B * H * Tl));
  const std::vector<float> prior = random_vec(B * Tl * W, 13 + static_cast<uint32_t>(r));
  std::vector<float> dx = prior;

  CpErrors e;
  const bool ring = variant == CpVariant::ring;
  const float *q = xl.data() + q_off, *k = xl.data() + k_off, *v = xl.data() + v_off;
  float *dq = dx.data() + q_off, *dk = dx.data() + k_off, *dv = dx.data() + v_off;
  if (variant == CpVariant::ring || variant == CpVariant::allgather) {
    auto fwd = ring ? cp::ring_attention_forward : cp::allgather_attention_forward;
    auto bwd = ring ? cp::ring_attention_backward : cp::allgather_attention_backward;
    e.fwd = fwd(out.data(), lse.data(), q, k, v, posl.data(), posl.data(), d, cp, site);
    e.bwd =
        bwd(dq, dk, dv, doutl.data(), out.data(), lse.data(), q, k, v, posl.data(), posl.data(), d, cp, site);
  } else {  // the hybrid's groups as the mesh's cp_a2a and cp_ring sub-axes cut them
    const bool hybrid = variant == CpVariant::hybrid;
    Group a2a = hybrid ? cp.split(r / 2, r % 2, "cp_a2a") : cp;
    Group across = hybrid ? cp.split(r % 2, r / 2, "cp_ring") : cp;
    Group* ring_group = hybrid ? &across : nullptr;
    cp::ulysses_attention_forward(out.data(), lse.data(), q, k, v, posl.data(), posl.data(), d, a2a,
                                  ring_group, 0, site);
    cp::ulysses_attention_backward(dq, dk, dv, doutl.data(), out.data(), lse.data(), q, k, v, posl.data(),
                                   posl.data(), d, a2a, ring_group, 0, site);
  }

  // One process, fp32, the whole sequence (its own prior to accumulate onto).
  std::vector<float> out1(static_cast<size_t>(B * T * HD)), lse1(static_cast<size_t>(B * H * T));
  const std::vector<float> prior1 = random_vec(B * T * W, 13);
  std::vector<float> dx1 = prior1;
  attention_forward(out1.data(), lse1.data(), x.data() + q_off, x.data() + k_off, x.data() + v_off,
                    pos.data(), pos.data(), full);
  attention_backward(dx1.data() + q_off, dx1.data() + k_off, dx1.data() + v_off, dout.data(), out1.data(),
                     lse1.data(), x.data() + q_off, x.data() + k_off, x.data() + v_off, pos.data(),
                     pos.data(), full);

  // Compare with the oracle's rows.
  std::vector<double> got_out, want_out, got_lse, want_lse, got_d[3], want_d[3];
  std::vector<double> one_out, one_lse, one_d[3];
  const int64_t col0[3] = {q_off, k_off, v_off}, ncol[3] = {HD, KV * D, KV * D};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < Tl; ++i) {
      const int64_t g = b * T + rows[static_cast<size_t>(i)], l = b * Tl + i;
      for (int64_t cidx = 0; cidx < out_stride; ++cidx) {
        const float o = out[static_cast<size_t>(l * out_stride + cidx)];
        if (cidx >= HD) {
          e.out_padding_kept = e.out_padding_kept && o == kPad;
          continue;
        }
        got_out.push_back(o);
        want_out.push_back(out_ref[static_cast<size_t>(g * HD + cidx)]);
        one_out.push_back(out1[static_cast<size_t>(g * HD + cidx)]);
      }
      for (int64_t h = 0; h < H; ++h) {
        got_lse.push_back(lse[static_cast<size_t>((b * H + h) * Tl + i)]);
        want_lse.push_back(lse_ref[static_cast<size_t>((b * H + h) * T + rows[static_cast<size_t>(i)])]);
        one_lse.push_back(lse1[static_cast<size_t>((b * H + h) * T + rows[static_cast<size_t>(i)])]);
      }
      for (int part = 0; part < 3; ++part) {
        for (int64_t cidx = col0[part]; cidx < col0[part] + ncol[part]; ++cidx) {
          const size_t li = static_cast<size_t>(l * W + cidx);
          got_d[part].push_back(static_cast<double>(dx[li]) - static_cast<double>(prior[li]));
          want_d[part].push_back(dx_ref[static_cast<size_t>(g * W + cidx)]);
          const size_t gi = static_cast<size_t>(g * W + cidx);
          one_d[part].push_back(static_cast<double>(dx1[gi]) - static_cast<double>(prior1[gi]));
        }
      }
    }
  }
  e.out = rel_err(got_out, want_out);
  e.lse = rel_err(got_lse, want_lse);
  e.dq = rel_err(got_d[0], want_d[0]);
  e.dk = rel_err(got_d[1], want_d[1]);
  e.dv = rel_err(got_d[2], want_d[2]);
  e.one_out = rel_err(one_out, want_out);
  e.one_lse = rel_err(one_lse, want_lse);
  e.one_dq = rel_err(one_d[0], want_d[0]);
  e.one_dk = rel_err(one_d[1], want_d[1]);
  e.one_dv = rel_err(one_d[2], want_d[2]);
  return e;
}

}  // namespace mt::test
