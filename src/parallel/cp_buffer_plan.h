// The buffers of the context-parallel attention calls (context_parallel.h), as
// data: for each call, every tracked buffer it allocates — its name, floats and
// allocator kind (core/memory.h) — in allocation order, with the point at which
// it is freed. It is the one source of these sizes: ring_attention_* and
// allgather_attention_* allocate from these entries (context_parallel.cpp) and
// the memory model (cost/memory_model_parts.cpp cp_floats, through
// cp_attention.h CpAttention::peak_floats) takes the same entries' peaks, so a buffer added here is allocated
// and counted at once (docs/ARCHITECTURE.md "Sizes are data").
//
// It lives in parallel/ beside the code that allocates from it; cost/ links
// parallel/ already (cost/CMakeLists.txt), so no lower library is needed.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "ops/attention.h"
#include "parallel/context_parallel.h"

namespace mt::cp {

// One key/value block packed for the wire: [k | v | pos], k and v
// [B, Tk, KV·D] without padding, pos [B, Tk] int32 bit-copied into f32 slots.
// Its floats are both a message's count and the size of the buffers holding one.
struct Packing {
  int64_t B, Tk, row;  // row = KV·D
  int64_t kv() const { return B * Tk * row; }
  int64_t numel() const { return 2 * kv() + B * Tk; }
  // The packed block read by attention: same dims with the packed stride.
  static AttentionDims dims(const AttentionDims& d) {
    AttentionDims p = d;
    p.kv_stride = d.n_kv_heads * d.head_dim;
    return p;
  }
};
Packing packing(const AttentionDims& d);

// The forward or the backward call of an implementation.
enum class Pass { forward, backward };

// One buffer of a call. `freed_before`: the index (in allocation order) of
// the first buffer allocated after this one is freed; kHeld: held until the
// call returns.
inline constexpr int kHeld = 1 << 30;
struct Buffer {
  const char* name = "";
  int64_t numel = 0;
  MemKind kind = MemKind::comm;
  int freed_before = kHeld;
};

// Every tracked buffer of one call, in allocation order (host vectors such as
// the gathered positions are not the allocator's and not listed).
struct CallPlan {
  std::vector<Buffer> buffers;
  // The entry named `name`; a name the plan lacks is a defect of the caller.
  const Buffer& at(std::string_view name) const;
  // A tracked tensor of that entry's floats and kind.
  Tensor make(std::string_view name) const;
  // The most floats of kind `kind` held at once during the call.
  int64_t peak(MemKind kind) const;
};

// What `impl`'s `pass` allocates on a rank of a cp group of size `cp` for the
// local attention dims `d` (the call's own argument): the ring nothing at
// cp = 1, the all-gather its buffers at any size.
CallPlan call_plan(const AttentionDims& d, CpImpl impl, int cp, Pass pass);

}  // namespace mt::cp
