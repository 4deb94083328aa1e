#include "parallel/cp_attention.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/context_parallel.h"
#include "parallel/cp_buffer_plan.h"
#include "parallel/cp_canonical.h"
#include "parallel/cp_ulysses.h"

namespace mt::cp {

namespace {

void local_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* qp,
                   const int32_t* kp, const AttentionDims& d, Group*, std::string_view) {
  attention_forward(out, lse, q, k, v, qp, kp, d);
}
void local_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                    const float* q, const float* k, const float* v, const int32_t* qp, const int32_t* kp,
                    const AttentionDims& d, Group*, std::string_view) {
  attention_backward(dq, dk, dv, dout, out, lse, q, k, v, qp, kp, d);
}
void ring_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* qp,
                  const int32_t* kp, const AttentionDims& d, Group* cp, std::string_view site) {
  ring_attention_forward(out, lse, q, k, v, qp, kp, d, *cp, site);
}
void ring_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                   const float* q, const float* k, const float* v, const int32_t* qp, const int32_t* kp,
                   const AttentionDims& d, Group* cp, std::string_view site) {
  ring_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, qp, kp, d, *cp, site);
}
void gather_forward(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* qp,
                    const int32_t* kp, const AttentionDims& d, Group* cp, std::string_view site) {
  allgather_attention_forward(out, lse, q, k, v, qp, kp, d, *cp, site);
}
void gather_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                     const float* q, const float* k, const float* v, const int32_t* qp, const int32_t* kp,
                     const AttentionDims& d, Group* cp, std::string_view site) {
  allgather_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, qp, kp, d, *cp, site);
}

// A cp group of one rank runs local attention: nothing to exchange.
bool distributed(int cp_size) {
  return cp_size > 1;
}

}  // namespace

CpAttention::CpAttention(Group* cp, CpImpl impl, int64_t canonical_cp, Group* a2a, Group* ring)
    : cp_(cp != nullptr && distributed(cp->size()) ? cp : nullptr),
      impl_(impl),
      canonical_(canonical_cp > 1 ? static_cast<int>(canonical_cp) : 0) {
  if (cp_ != nullptr && impl == CpImpl::ulysses) a2a_ = cp_;
  if (cp_ != nullptr && impl == CpImpl::hybrid) {
    MT_CHECK(a2a != nullptr && ring != nullptr && a2a->size() * ring->size() == cp_->size(),
             "cp_impl = hybrid needs the cp_a2a and cp_ring groups of the mesh (ModelOptions::mesh)");
    a2a_ = a2a;
    ring_ = ring;
  }
  if (cp_ == nullptr) {
    forward_ = local_forward;
    backward_ = local_backward;
  } else if (impl == CpImpl::ring) {
    forward_ = ring_forward;
    backward_ = ring_backward;
  } else {
    forward_ = gather_forward;
    backward_ = gather_backward;
  }
}

int64_t CpAttention::peak_floats(const AttentionDims& d, CpImpl impl, int cp_size, MemKind kind,
                                 int64_t canonical_cp, int a2a_size) {
  const int C = canonical_cp > 1 ? static_cast<int>(canonical_cp) : 0;
  if (distributed(cp_size) && (impl == CpImpl::ulysses || impl == CpImpl::hybrid)) {
    const int U = impl == CpImpl::ulysses ? cp_size : a2a_size;
    return std::max(ulysses_call_plan(d, U, cp_size / U, C, Pass::forward).peak(kind),
                    ulysses_call_plan(d, U, cp_size / U, C, Pass::backward).peak(kind));
  }
  if (C > 0) {
    return std::max(canonical_call_plan(d, impl, cp_size, C, Pass::forward).peak(kind),
                    canonical_call_plan(d, impl, cp_size, C, Pass::backward).peak(kind));
  }
  if (!distributed(cp_size)) return 0;
  return std::max(call_plan(d, impl, cp_size, Pass::forward).peak(kind),
                  call_plan(d, impl, cp_size, Pass::backward).peak(kind));
}

void CpAttention::rotate(float* qkv, const int32_t* pos, const RopeTable& rope, int64_t N, int64_t H,
                         int64_t KV, int64_t QKV) {
  const int64_t D = QKV / (H + 2 * KV);
  rope_forward(qkv, pos, rope, N, H, QKV);           // q
  rope_forward(qkv + H * D, pos, rope, N, KV, QKV);  // k
}

void CpAttention::forward(int64_t /*layer*/, float* out, float* lse, const float* q, const float* k,
                          const float* v, const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                          std::string_view site) {
  if (a2a_ != nullptr)
    return ulysses_attention_forward(out, lse, q, k, v, q_pos, k_pos, d, *a2a_, ring_, canonical_, site);
  if (canonical_ > 0)
    return canonical_attention_forward(out, lse, q, k, v, q_pos, k_pos, d, cp_, impl_, canonical_, site);
  forward_(out, lse, q, k, v, q_pos, k_pos, d, cp_, site);
}

void CpAttention::backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                           const float* lse, const float* q, const float* k, const float* v,
                           const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                           std::string_view site) {
  if (a2a_ != nullptr)
    return ulysses_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, q_pos, k_pos, d, *a2a_, ring_,
                                      canonical_, site);
  if (canonical_ > 0)
    return canonical_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, q_pos, k_pos, d, cp_, impl_,
                                        canonical_, site);
  backward_(dq, dk, dv, dout, out, lse, q, k, v, q_pos, k_pos, d, cp_, site);
}

}  // namespace mt::cp
