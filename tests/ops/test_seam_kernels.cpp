// The kernels that moved the parallel layers' loops behind the table
// (ops/primitives.h fill, copy_rows, add_rows; ops/split_rmsnorm.h;
// ops/moe_kernels.h): each against its definition written out here, and the
// fake device's table (pointers that fault on a host read) bitwise the cpu one's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/device.h"
#include "ops/kernels.h"
#include "ops/moe_kernels.h"
#include "ops/primitives.h"
#include "ops/split_rmsnorm.h"

namespace mt {
namespace {

std::vector<float> ramp(int64_t n, float scale, float shift) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = std::sin(static_cast<float>(i) * scale + shift);
  return v;
}

// Host arrays on the run's device and back (the fake device's counted copies).
template <class T>
struct OnDevice {
  explicit OnDevice(const std::vector<T>& h)
      : n(static_cast<int64_t>(h.size())),
        buf(run_allocator(), std::max<int64_t>(n, 1) * int64_t{sizeof(T)}, MemKind::scratch) {
    copy_from_host(buf.data(), h.data(), n * int64_t{sizeof(T)}, "test");
  }
  T* data() { return static_cast<T*>(buf.data()); }
  std::vector<T> host() const {
    std::vector<T> h(static_cast<size_t>(n));
    copy_to_host(h.data(), buf.data(), n * int64_t{sizeof(T)}, "test");
    return h;
  }
  int64_t n;
  DeviceBuffer buf;
};

// Runs f(arrays on the device) on `dev` and returns the arrays it wrote.
template <class F>
std::vector<std::vector<float>> run_on(RunDevice dev, const std::vector<std::vector<float>>& in, F&& f) {
  const RunDeviceGuard guard(dev);
  std::vector<OnDevice<float>> d;
  d.reserve(in.size());
  for (const auto& v : in)
    d.emplace_back(v);
  f(d);
  std::vector<std::vector<float>> out;
  for (const auto& x : d)
    out.push_back(x.host());
  return out;
}

template <class F>
std::vector<std::vector<float>> cpu_checked_against_fake(const std::vector<std::vector<float>>& in, F&& f) {
  const auto cpu = run_on(RunDevice::cpu, in, f);
  const auto fake = run_on(RunDevice::fake, in, f);
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_EQ(0, std::memcmp(cpu[i].data(), fake[i].data(), cpu[i].size() * sizeof(float))) << "array " << i;
  return cpu;
}

TEST(SeamKernels, FillCopyRowsAddRows) {
  const int64_t rows = 5, cols = 3, ds = 7, ss = 4;
  const std::vector<float> dst = ramp(rows * ds, 0.3f, 0.1f), src = ramp(rows * ss, 0.7f, 0.5f);
  const auto out = cpu_checked_against_fake({dst, src, dst, std::vector<float>(6)}, [&](auto& d) {
    copy_rows(d[0].data(), ds, d[1].data(), ss, rows, cols);
    add_rows(d[2].data(), ds, d[1].data(), ss, rows, cols);
    fill(d[3].data(), -2.5f, 6);
  });
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < ds; ++c) {
      const auto i = static_cast<size_t>(r * ds + c);
      const float s = c < cols ? src[static_cast<size_t>(r * ss + c)] : 0.0f;
      EXPECT_EQ(out[0][i], c < cols ? s : dst[i]) << r << "," << c;
      EXPECT_EQ(out[2][i], c < cols ? dst[i] + s : dst[i]) << r << "," << c;
    }
  }
  EXPECT_EQ(out[3], std::vector<float>(6, -2.5f));
}

// With every feature on one rank the split RMSNorm is the RMSNorm; its parts
// are checked against the double formula.
TEST(SeamKernels, SplitRmsnormMatchesTheFormula) {
  const int64_t N = 3, C = 8;
  const float eps = 1e-5f;
  const std::vector<float> x = ramp(N * C, 0.9f, 0.2f), w = ramp(C, 0.4f, 1.0f), dy = ramp(N * C, 1.3f, 0.7f);
  const auto out = cpu_checked_against_fake(
      {x, w, dy, std::vector<float>(N * C), std::vector<float>(N), std::vector<float>(N * C),
       std::vector<float>(C)},
      [&](auto& d) {
        DeviceBuffer ss(run_allocator(), N * 8, MemKind::scratch),
            dot(run_allocator(), N * 8, MemKind::scratch);
        auto* s = static_cast<double*>(ss.data());
        auto* t = static_cast<double*>(dot.data());
        split_rmsnorm_sum_squares(s, d[0].data(), N, C);
        split_rmsnorm_scale(d[3].data(), d[4].data(), d[0].data(), d[1].data(), s, N, C, C, eps);
        split_rmsnorm_dot(t, d[2].data(), d[0].data(), d[1].data(), N, C);
        split_rmsnorm_backward(d[5].data(), d[6].data(), d[2].data(), d[0].data(), d[1].data(), d[4].data(),
                               t, N, C, C);
      });
  std::vector<double> dw(static_cast<size_t>(C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0, dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      const auto i = static_cast<size_t>(n * C + c);
      ss += double{x[i]} * x[i];
      dot += double{w[static_cast<size_t>(c)]} * dy[i] * x[i];
    }
    const double r = 1.0 / std::sqrt(ss / C + eps);
    EXPECT_NEAR(out[4][static_cast<size_t>(n)], r, 1e-6 * r);
    for (int64_t c = 0; c < C; ++c) {
      const auto i = static_cast<size_t>(n * C + c);
      EXPECT_NEAR(out[3][i], x[i] * r * w[static_cast<size_t>(c)], 1e-5);
      EXPECT_NEAR(out[5][i], r * w[static_cast<size_t>(c)] * dy[i] - r * r * r / C * x[i] * dot, 1e-5);
      dw[static_cast<size_t>(c)] += double{dy[i]} * x[i] * r;
    }
  }
  for (int64_t c = 0; c < C; ++c)
    EXPECT_NEAR(out[6][static_cast<size_t>(c)], dw[static_cast<size_t>(c)], 1e-5);
}

// Two tokens, k = 2, three rows kept (choice 2 dropped): the row moves are
// permutations, the weighted sum its formula.
TEST(SeamKernels, MoeRowMovesAndWeightedSums) {
  const int64_t N = 2, k = 2, C = 3, R = 3;
  const std::vector<int64_t> order{3, 0, 1}, row_of{1, 2, -1, 0};  // row r holds choice order[r]
  const std::vector<float> x = ramp(N * C, 0.5f, 0.3f), ys = ramp(R * C, 0.8f, 0.1f),
                           w{0.25f, 0.75f, 0.6f, 0.4f};
  const std::vector<float> mid = ramp(N * C, 1.1f, 0.9f), dy = ramp(N * C, 0.6f, 1.7f);
  const std::vector<float> z(static_cast<size_t>(N * k * C));
  auto run = [&](auto& d) {
    OnDevice<int64_t> o(order), ro(row_of);
    moe_dispatch(d[0].data(), d[1].data(), o.data(), R, k, C);            // xs [R, C]
    moe_combine(d[2].data(), d[3].data(), ro.data(), N * k, C);           // yk [N·k, C]
    moe_dispatch_backward(d[4].data(), d[3].data(), ro.data(), N, k, C);  // dx [N, C] from dxs = ys
    moe_combine_backward(d[5].data(), d[2].data(), o.data(), R, C);       // dys [R, C] from dyk = yk
    moe_weighted_sum(d[6].data(), d[7].data(), d[8].data(), d[2].data(), N, k, C);
    moe_weighted_sum_backward(d[9].data(), d[10].data(), d[11].data(), d[8].data(), d[2].data(), N, k, C);
  };
  const auto out = cpu_checked_against_fake(
      {std::vector<float>(R * C), x, z, ys, std::vector<float>(N * C), std::vector<float>(R * C),
       std::vector<float>(N * C), mid, w, z, std::vector<float>(N * k), dy},
      run);
  auto at = [&](const std::vector<float>& v, int64_t row, int64_t c) {
    return v[static_cast<size_t>(row * C + c)];
  };
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t r = 0; r < R; ++r) {
      EXPECT_EQ(at(out[0], r, c), at(x, order[static_cast<size_t>(r)] / k, c));
      EXPECT_EQ(at(out[5], r, c), at(out[2], order[static_cast<size_t>(r)], c));
    }
    for (int64_t ch = 0; ch < N * k; ++ch) {
      const int64_t r = row_of[static_cast<size_t>(ch)];
      EXPECT_EQ(at(out[2], ch, c), r < 0 ? 0.0f : at(ys, r, c));
    }
    EXPECT_EQ(at(out[4], 0, c), at(ys, 1, c) + at(ys, 2, c));  // token 0: rows 1, 2
    EXPECT_EQ(at(out[4], 1, c), at(ys, 0, c));                 // token 1: choice 2 dropped
    for (int64_t n = 0; n < N; ++n) {
      double y = at(mid, n, c);
      for (int64_t s = 0; s < k; ++s)
        y += double{w[static_cast<size_t>(n * k + s)]} * at(out[2], n * k + s, c);
      EXPECT_NEAR(at(out[6], n, c), y, 1e-6);
      for (int64_t s = 0; s < k; ++s)
        EXPECT_EQ(at(out[9], n * k + s, c), w[static_cast<size_t>(n * k + s)] * at(dy, n, c));
    }
  }
  for (int64_t ch = 0; ch < N * k; ++ch) {
    double dot = 0;
    for (int64_t c = 0; c < C; ++c)
      dot += double{at(dy, ch / k, c)} * at(out[2], ch, c);
    EXPECT_NEAR(out[10][static_cast<size_t>(ch)], dot, 1e-6);
  }
}

}  // namespace
}  // namespace mt
