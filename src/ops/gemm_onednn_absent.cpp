// The stand-in for gemm_onednn.cpp in a build without oneDNN: the path is never
// available, so sgemm runs the emulated rule (gemm.cpp).
#include "core/error.h"
#include "ops/gemm_onednn.h"

namespace mt::onednn {

const std::string& unavailable_reason() {
  static const std::string reason = "this build has no oneDNN";
  return reason;
}

std::string describe() {
  return unavailable_reason();
}

void sgemm_bf16(Trans, Trans, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*,
                int64_t, Out) {
  MT_CHECK(false, "oneDNN's bf16 matmul called in a build without oneDNN");
}

void matmul_bf16(Trans, Trans, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                 float*, int64_t, Out) {
  MT_CHECK(false, "oneDNN's bf16 matmul called in a build without oneDNN");
}

void linear_forward_bf16(float*, const float*, const float*, int64_t, int64_t, int64_t, Out) {
  MT_CHECK(false, "oneDNN's bf16 matmul called in a build without oneDNN");
}

bool tiles_take(int64_t, int64_t, int64_t) {
  return false;
}

void set_weight_ranges(std::vector<std::span<const float>>) {}

void linear_backward_bf16(float*, float*, const float*, const float*, const float*, int64_t, int64_t,
                          int64_t) {
  MT_CHECK(false, "oneDNN's bf16 matmul called in a build without oneDNN");
}

}  // namespace mt::onednn
