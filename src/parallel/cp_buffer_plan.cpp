// The context-parallel attention's buffer plan (contracts in the header). Each
// list mirrors its call in context_parallel.cpp, which allocates every tracked
// buffer through CallPlan::make: a buffer the call needs and the plan lacks
// stops the call (CallPlan::at), and tests/cp/test_cp_buffers.cpp holds the
// tracked peak of every call to the plan's.
#include "parallel/cp_buffer_plan.h"

#include <algorithm>

#include "core/error.h"

namespace mt::cp {

namespace {

// Ring, forward: the block being attended and the one in flight; one step's
// partial output [B, Tl, out_stride] and log-sum-exp [B, H, Tl] before they
// are merged.
std::vector<Buffer> ring_forward(const AttentionDims& d, const Packing& p) {
  return {{"kv_block.0", p.numel(), MemKind::comm},
          {"kv_block.1", p.numel(), MemKind::comm},
          {"part_out", d.batch * d.q_len * d.out_stride, MemKind::scratch},
          {"part_lse", d.batch * d.n_heads * d.q_len, MemKind::scratch}};
}

// Ring, backward: the two k/v blocks, the travelling [dk | dv] being sent
// (two: one may still be on the wire) and the one received.
std::vector<Buffer> ring_backward(const Packing& p) {
  return {{"kv_block.0", p.numel(), MemKind::comm},
          {"dkv_send.0", 2 * p.kv(), MemKind::comm},
          {"kv_block.1", p.numel(), MemKind::comm},
          {"dkv_send.1", 2 * p.kv(), MemKind::comm},
          {"dkv_inbox", 2 * p.kv(), MemKind::comm}};
}

// All-gather: this rank's packed block and every rank's (freed once unpacked,
// before anything else is allocated: entry 4), unpacked into k and v
// [B, P·Tk, KV·D]; the backward adds their gradients, the rank-major
// [P][dk | dv] it reduce-scatters and this rank's share of the result.
std::vector<Buffer> allgather(const Packing& p, int P, Pass pass) {
  std::vector<Buffer> b = {{"kv_mine", p.numel(), MemKind::comm, 4},
                           {"kv_all", P * p.numel(), MemKind::comm, 4},
                           {"k_all", P * p.kv(), MemKind::comm},
                           {"v_all", P * p.kv(), MemKind::comm}};
  if (pass == Pass::backward) {
    b.push_back({"dk_all", P * p.kv(), MemKind::comm});
    b.push_back({"dv_all", P * p.kv(), MemKind::comm});
    b.push_back({"dkv_send", P * 2 * p.kv(), MemKind::comm});
    b.push_back({"dkv_mine", 2 * p.kv(), MemKind::comm});
  }
  return b;
}

}  // namespace

Packing packing(const AttentionDims& d) {
  return {d.batch, d.kv_len, d.n_kv_heads * d.head_dim};
}

const Buffer& CallPlan::at(std::string_view name) const {
  for (const Buffer& b : buffers)
    if (name == b.name) return b;
  MT_CHECK(false, "the context-parallel buffer plan has no buffer '", name, "'");
  return buffers.front();
}

Tensor CallPlan::make(std::string_view name) const {
  const Buffer& b = at(name);
  return Tensor({b.numel}, b.kind);
}

int64_t CallPlan::peak(MemKind kind) const {
  int64_t most = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {  // the moment buffer i is allocated
    int64_t held = 0;
    for (size_t j = 0; j <= i; ++j) {
      const Buffer& b = buffers[j];
      if (b.kind == kind && static_cast<size_t>(b.freed_before) > i) held += b.numel;
    }
    most = std::max(most, held);
  }
  return most;
}

CallPlan call_plan(const AttentionDims& d, CpImpl impl, int cp, Pass pass) {
  const Packing p = packing(d);
  CallPlan plan;
  if (impl == CpImpl::allgather) {
    plan.buffers = allgather(p, cp, pass);
  } else if (cp > 1) {
    plan.buffers = pass == Pass::forward ? ring_forward(d, p) : ring_backward(p);
  }
  return plan;
}

}  // namespace mt::cp
