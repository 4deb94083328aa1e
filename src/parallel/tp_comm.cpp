#include "parallel/tp_comm.h"

#include "core/error.h"

namespace mt::tp {

std::string comm_label(std::string_view site, std::string_view pair, std::string_view direction,
                       std::initializer_list<int64_t> shape) {
  std::string s(site);
  s += ": ";
  s += pair;
  s += ' ';
  s += direction;
  if (shape.size() > 0) {
    s += " [";
    const char* sep = "";
    for (int64_t d : shape) {
      s += sep + std::to_string(d);
      sep = ", ";
    }
    s += ']';
  }
  return s;
}

int64_t sp_local_tokens(int64_t N, const Group& tp) {
  const int P = tp.size();
  MT_REQUIRE(N % P == 0, ConfigError, "tokens (", N, ") must be divisible by tp (", P,
             ") under sequence parallelism");
  return N / P;
}

void check_sequence_parallel(int64_t seq_len, int64_t cp, int64_t tp) {
  MT_REQUIRE(tp > 1, ConfigError, "parallel.sp = true needs tensor parallelism: parallel.tp (", tp,
             ") must be greater than 1");
  if (cp == 1) {
    MT_REQUIRE(seq_len % tp == 0, ConfigError, "train.seq_len (", seq_len,
               ") must be divisible by parallel.tp (", tp,
               ") with parallel.sp = true: sequence parallelism splits each sequence's tokens over tp");
  } else {
    MT_REQUIRE((seq_len / cp) % tp == 0, ConfigError, "train.seq_len / parallel.cp (", seq_len / cp,
               ") must be divisible by parallel.tp (", tp,
               ") with parallel.sp = true: sequence parallelism splits each rank's tokens over tp");
  }
}

void copy_to_tp_forward(const float* /*x*/, int64_t /*rows*/, int64_t /*cols*/, Group& /*tp*/,
                        std::string_view /*site*/) {}

void copy_to_tp_backward(float* dx, int64_t rows, int64_t cols, Group& tp, std::string_view site) {
  tp.all_reduce(dx, rows * cols, ElemType::f32, SumOrder::ranks,
                comm_label(site, "copy_to_tp", "backward", {rows, cols}));
}

void reduce_from_tp_forward(float* x, int64_t rows, int64_t cols, Group& tp, std::string_view site) {
  tp.all_reduce(x, rows * cols, ElemType::f32, SumOrder::ranks,
                comm_label(site, "reduce_from_tp", "forward", {rows, cols}));
}

void reduce_from_tp_backward(const float* /*dx*/, int64_t /*rows*/, int64_t /*cols*/, Group& /*tp*/,
                             std::string_view /*site*/) {}

void gather_from_sp_forward(float* out, const float* inp, int64_t N, int64_t C, Group& tp,
                            std::string_view site) {
  const int64_t Nl = sp_local_tokens(N, tp);
  tp.all_gather(inp, out, Nl * C, ElemType::f32, comm_label(site, "gather_from_sp", "forward", {Nl, C}));
}

void gather_from_sp_backward(float* dinp, const float* dout, int64_t N, int64_t C, Group& tp,
                             std::string_view site) {
  const int64_t Nl = sp_local_tokens(N, tp);
  tp.reduce_scatter(dout, dinp, Nl * C, ElemType::f32, SumOrder::ranks,
                    comm_label(site, "gather_from_sp", "backward", {N, C}));
}

void scatter_to_sp_forward(float* out, const float* inp, int64_t N, int64_t C, Group& tp,
                           std::string_view site) {
  const int64_t Nl = sp_local_tokens(N, tp);
  tp.reduce_scatter(inp, out, Nl * C, ElemType::f32, SumOrder::ranks,
                    comm_label(site, "scatter_to_sp", "forward", {N, C}));
}

void scatter_to_sp_backward(float* dinp, const float* dout, int64_t N, int64_t C, Group& tp,
                            std::string_view site) {
  const int64_t Nl = sp_local_tokens(N, tp);
  tp.all_gather(dout, dinp, Nl * C, ElemType::f32, comm_label(site, "scatter_to_sp", "backward", {Nl, C}));
}

}  // namespace mt::tp
