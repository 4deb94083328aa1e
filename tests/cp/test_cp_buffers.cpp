// The context-parallel attention's buffer plan (parallel/cp_buffer_plan.h)
// against the tracked allocator: each call (ring and all-gather, forward and
// backward, cp = 1, 2 and 4) is run alone, and the growth of the tracker's
// peak per kind over the call must equal the plan's peak exactly, with every
// buffer freed on return. The plan's peaks are also held to a count by hand
// from the call's code (n_kv = B·Tl·KV·D, a packed block m = 2·n_kv + B·Tl):
//   ring forward     comm 2·m (two blocks);  scratch B·Tl·out_stride + B·H·Tl
//   ring backward    comm 2·m + 3·2·n_kv (two blocks, two dk|dv sends, one inbox)
//   all-gather fwd   comm m + P·m + 2·P·n_kv (own and gathered blocks, unpacked k, v)
//   all-gather bwd   comm max(that, 6·P·n_kv + 2·n_kv) (k, v, dk, dv, the
//                    reduce-scatter's send and receive, once the packed blocks are freed)
// and the ring at cp = 1 allocates nothing. The memory model reads these peaks
// through CpAttention::peak_floats, also checked here.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "cp_test_util.h"
#include "parallel/context_parallel.h"
#include "parallel/cp_attention.h"
#include "parallel/cp_buffer_plan.h"

namespace mt {
namespace {

using cp::CpImpl;
using cp::Pass;

struct Peak {
  int64_t comm = 0, scratch = 0;  // floats above what was held before the call
  bool all_freed = true;
};

// One call of `impl`'s `pass` on random inputs, its tracked peaks in floats.
Peak run_call(CpImpl impl, Pass pass, const AttentionDims& d, Group& g) {
  test::CallBuffers c(d, g, 21);
  const int32_t* p = c.pos.data();
  const bool ring = impl == CpImpl::ring;
  auto fwd = ring ? cp::ring_attention_forward : cp::allgather_attention_forward;
  auto bwd = ring ? cp::ring_attention_backward : cp::allgather_attention_backward;
  if (pass == Pass::backward) fwd(c.out.data(), c.lse.data(), c.q, c.k, c.v, p, p, d, g, "attn");
  const MemStats before = MemoryTracker::stats();
  MemoryTracker::reset_peaks();
  if (pass == Pass::forward) {
    fwd(c.out.data(), c.lse.data(), c.q, c.k, c.v, p, p, d, g, "attn");
  } else {
    bwd(c.dq(), c.dk(), c.dv(), c.dout.data(), c.out.data(), c.lse.data(), c.q, c.k, c.v, p, p, d, g, "attn");
  }
  const MemStats after = MemoryTracker::stats();
  const auto grew = [&](MemKind kind) {
    const size_t i = static_cast<size_t>(kind);
    return (after.peak[i] - before.current[i]) / 4;
  };
  return {grew(MemKind::comm), grew(MemKind::scratch), after.total_current == before.total_current};
}

// The count by hand of the header comment.
Peak by_hand(CpImpl impl, Pass pass, const AttentionDims& d, int P) {
  const int64_t nkv = d.batch * d.kv_len * d.n_kv_heads * d.head_dim, m = 2 * nkv + d.batch * d.kv_len;
  if (impl == CpImpl::ring) {
    if (P == 1) return {};
    if (pass == Pass::forward) return {2 * m, d.batch * d.q_len * (d.out_stride + d.n_heads)};
    return {2 * m + 6 * nkv, 0};
  }
  const int64_t gather = m + P * m + 2 * P * nkv;
  return {pass == Pass::forward ? gather : std::max(gather, 6 * P * nkv + 2 * nkv), 0};
}

TEST(CpBuffers, TrackedPeakOfEveryCallEqualsThePlan) {
  for (int P = 1; P <= test::world().size(); P *= 2) {
    Group g = test::cp_mesh(P).group("cp");
    // B, Tl, H, KV, D; out_stride padded beyond H·D as a caller's may be.
    for (const auto& [B, Tl, H, KV, D] : {std::array<int64_t, 5>{2, 4, 4, 2, 8}, {1, 6, 6, 3, 4}}) {
      const int64_t W = (H + 2 * KV) * D;
      const AttentionDims d{B, Tl, Tl, H, KV, D, W, W, H * D + 3};
      for (const CpImpl impl : {CpImpl::ring, CpImpl::allgather}) {
        int64_t most_comm = 0, most_scratch = 0;
        for (const Pass pass : {Pass::forward, Pass::backward}) {
          SCOPED_TRACE(::testing::Message() << "cp " << P << (impl == CpImpl::ring ? " ring" : " allgather")
                                            << (pass == Pass::forward ? " forward" : " backward") << " B "
                                            << B << " Tl " << Tl << " H " << H << " KV " << KV << " D " << D);
          const cp::CallPlan plan = cp::call_plan(d, impl, P, pass);
          const Peak got = run_call(impl, pass, d, g), hand = by_hand(impl, pass, d, P);
          EXPECT_EQ(got.comm, plan.peak(MemKind::comm));
          EXPECT_EQ(got.scratch, plan.peak(MemKind::scratch));
          EXPECT_TRUE(got.all_freed);
          EXPECT_EQ(plan.peak(MemKind::comm), hand.comm);
          EXPECT_EQ(plan.peak(MemKind::scratch), hand.scratch);
          EXPECT_EQ(plan.peak(MemKind::activation), 0);
          most_comm = std::max(most_comm, got.comm);
          most_scratch = std::max(most_scratch, got.scratch);
        }
        // The strategy runs local attention at cp = 1, whatever impl says.
        EXPECT_EQ(cp::CpAttention::peak_floats(d, impl, P, MemKind::comm), P > 1 ? most_comm : 0);
        EXPECT_EQ(cp::CpAttention::peak_floats(d, impl, P, MemKind::scratch), P > 1 ? most_scratch : 0);
      }
    }
  }
}

TEST(CpBuffers, ANameThePlanLacksIsRefused) {
  const AttentionDims d{1, 4, 4, 2, 1, 4, 16, 16, 8};
  const cp::CallPlan plan = cp::call_plan(d, CpImpl::ring, 2, Pass::forward);
  EXPECT_EQ(plan.at("part_lse").numel, 1 * 2 * 4);
  EXPECT_THROW(plan.at("dkv_inbox"), Error);  // the backward's, not the forward's
  EXPECT_TRUE(cp::call_plan(d, CpImpl::ring, 1, Pass::backward).buffers.empty());
}

}  // namespace
}  // namespace mt
