#include "ops/reference.h"

#include <cmath>

namespace mt::ref {

void linear_forward(double* out, const double* inp, const double* weight, int64_t N, int64_t IC, int64_t OC) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < OC; ++o) {
      double sum = 0.0;
      for (int64_t i = 0; i < IC; ++i)
        sum += inp[n * IC + i] * weight[o * IC + i];
      out[n * OC + o] = sum;
    }
  }
}

void linear_backward(double* dinp, double* dweight, const double* dout, const double* inp,
                     const double* weight, int64_t N, int64_t IC, int64_t OC) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < IC; ++i) {
      double sum = 0.0;
      for (int64_t o = 0; o < OC; ++o)
        sum += dout[n * OC + o] * weight[o * IC + i];
      dinp[n * IC + i] = sum;
    }
  }
  for (int64_t o = 0; o < OC; ++o) {
    for (int64_t i = 0; i < IC; ++i) {
      double sum = 0.0;
      for (int64_t n = 0; n < N; ++n)
        sum += dout[n * OC + o] * inp[n * IC + i];
      dweight[o * IC + i] += sum;
    }
  }
}

void embedding_forward(double* out, const int32_t* ids, const double* table, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c)
      out[n * C + c] = table[ids[n] * C + c];
  }
}

void embedding_backward(double* dtable, const double* dout, const int32_t* ids, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c)
      dtable[ids[n] * C + c] += dout[n * C + c];
  }
}

void rmsnorm_forward(double* out, double* rstd, const double* inp, const double* weight, int64_t N, int64_t C,
                     double eps) {
  for (int64_t n = 0; n < N; ++n) {
    double mean_sq = 0.0;
    for (int64_t c = 0; c < C; ++c)
      mean_sq += inp[n * C + c] * inp[n * C + c];
    mean_sq /= static_cast<double>(C);
    const double r = 1.0 / std::sqrt(mean_sq + eps);
    rstd[n] = r;
    for (int64_t c = 0; c < C; ++c)
      out[n * C + c] = inp[n * C + c] * r * weight[c];
  }
}

void rmsnorm_backward(double* dinp, double* dweight, const double* dout, const double* inp,
                      const double* weight, const double* rstd, int64_t N, int64_t C) {
  // y_c = x_c · r · w_c with r = (mean(x²) + eps)^(−1/2), so ∂r/∂x_j = −r³ · x_j / C and
  //   dx_j = r · w_j · dy_j − r³ · x_j / C · Σ_c dy_c · w_c · x_c
  for (int64_t n = 0; n < N; ++n) {
    const double r = rstd[n];
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c)
      dot += dout[n * C + c] * weight[c] * inp[n * C + c];
    for (int64_t j = 0; j < C; ++j) {
      dinp[n * C + j] =
          r * weight[j] * dout[n * C + j] - r * r * r * inp[n * C + j] / static_cast<double>(C) * dot;
    }
    for (int64_t c = 0; c < C; ++c)
      dweight[c] += dout[n * C + c] * inp[n * C + c] * r;
  }
}

namespace {

void rope_rotate(double* x, const int32_t* pos, int64_t N, int64_t n_heads, int64_t head_dim,
                 int64_t row_stride, double theta, double sign) {
  const int64_t half = head_dim / 2;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < n_heads; ++h) {
      double* head = x + n * row_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
        const double angle = sign * static_cast<double>(pos[n]) * freq;
        const double a = head[i];
        const double b = head[i + half];
        head[i] = a * std::cos(angle) - b * std::sin(angle);
        head[i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
}

}  // namespace

void rope_forward(double* x, const int32_t* pos, int64_t N, int64_t n_heads, int64_t head_dim,
                  int64_t row_stride, double theta) {
  rope_rotate(x, pos, N, n_heads, head_dim, row_stride, theta, 1.0);
}

void rope_backward(double* dx, const int32_t* pos, int64_t N, int64_t n_heads, int64_t head_dim,
                   int64_t row_stride, double theta) {
  rope_rotate(dx, pos, N, n_heads, head_dim, row_stride, theta, -1.0);
}

void swiglu_forward(double* out, const double* gu, int64_t N, int64_t F) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      const double g = gu[n * 2 * F + f];
      const double u = gu[n * 2 * F + F + f];
      const double sigmoid = 1.0 / (1.0 + std::exp(-g));
      out[n * F + f] = g * sigmoid * u;
    }
  }
}

void swiglu_backward(double* dgu, const double* dout, const double* gu, int64_t N, int64_t F) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      const double g = gu[n * 2 * F + f];
      const double u = gu[n * 2 * F + F + f];
      const double sigmoid = 1.0 / (1.0 + std::exp(-g));
      const double silu = g * sigmoid;
      const double dsilu = sigmoid + g * sigmoid * (1.0 - sigmoid);
      dgu[n * 2 * F + f] = dout[n * F + f] * u * dsilu;
      dgu[n * 2 * F + F + f] = dout[n * F + f] * silu;
    }
  }
}

void cross_entropy_forward(double* losses, double* lse, const double* logits, const int32_t* targets,
                           int64_t N, int64_t V, int32_t ignore_index) {
  for (int64_t n = 0; n < N; ++n) {
    const double* x = logits + n * V;
    double max = x[0];
    for (int64_t v = 1; v < V; ++v)
      max = std::fmax(max, x[v]);
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v)
      sum += std::exp(x[v] - max);
    lse[n] = max + std::log(sum);
    losses[n] = targets[n] == ignore_index ? 0.0 : lse[n] - x[targets[n]];
  }
}

void cross_entropy_backward(double* dlogits, const double* logits, const double* lse, const int32_t* targets,
                            double dloss, int64_t N, int64_t V, int32_t ignore_index) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < V; ++v) {
      if (targets[n] == ignore_index) {
        dlogits[n * V + v] = 0.0;
        continue;
      }
      const double softmax = std::exp(logits[n * V + v] - lse[n]);
      const double onehot = v == targets[n] ? 1.0 : 0.0;
      dlogits[n * V + v] = dloss * (softmax - onehot);
    }
  }
}

}  // namespace mt::ref
