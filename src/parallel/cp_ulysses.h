// Ulysses and hybrid context parallelism (parallel.cp_impl = ulysses | hybrid;
// docs/PARALLELISM.md "Ulysses and hybrid context parallelism").
//
// Ulysses trades the sequence split for a head split around attention. Each of
// the U ranks of an all-to-all group holds Tl tokens of every sequence and all
// H (local) heads; one all-to-all sends rank i the q, k, v of its head share
// for this rank's tokens, so that afterwards each rank holds U·Tl tokens and
// H/U heads, attends them, and a second all-to-all returns the output rows to
// the tokens' owners. Nothing else in the layer sees the exchange.
//
//   heads after: Hu = H / U query heads, rank i's [i·Hu, (i+1)·Hu);
//                KV ≥ U: KV / U kv heads, rank i's [i·KV/U, …);
//                KV < U (U divisible by KV): the one kv head its query heads
//                read, replicated over the U / KV ranks sharing it (their
//                key gradients are added back at the owner in rank order).
//   tokens after: sequence b's rows are rank 0's Tl rows, then rank 1's, …,
//                 positions travel with them (the mask reads global positions).
//
// Hybrid (U < cp): the cp axis is cut into groups of U consecutive ranks (the
// mesh's cp_a2a sub-axis); the all-to-all runs inside a group and the ring
// attention of context_parallel.h runs across groups (cp_ring: the cp / U
// ranks with the same index in their group), over the group's U·Tl tokens.
// Pure Ulysses is the hybrid with one group (no ring).
//
// Canonical mode (C > 0): the attention over the gathered tokens is
// cp_canonical.h's over the ring (null: one process) with grain C. The
// gathered rows of group s are the pieces of rank s of cp / U in piece order,
// so each head is the one-process computation; a kv head shared by ranks is
// refused there by validation (its key gradient would be summed across ranks).
//
// Contracts as context_parallel.h's (forward assigns out and lse [B, H, Tl];
// backward accumulates dq, dk, dv), with q_pos = k_pos: self-attention, the
// same tokens. The lse travels back with the output, so the caller's lse keeps
// its layout; the backward re-sends q, k, v, out, dout and lse (nothing is
// kept between the calls).
//
// Ledger (n = B·Tl, row = (Hu + 2·KVu)·D), all_to_all over the a2a group:
//   forward   "<site>: ulysses q,k,v,pos forward [U, B, Tl, row + 1]"
//             "<site>: ulysses out,lse forward [U, B, Tl, Hu·D + Hu]"
//   backward  "<site>: ulysses q,k,v,out,dout,lse,pos backward [U, B, Tl, row + 2·Hu·D + Hu + 1]"
//             "<site>: ulysses dq,dk,dv backward [U, B, Tl, row]"
// each of U·n·width elements; the hybrid adds the ring's entries
// (context_parallel.h) over the cp_ring group for the gathered dims.
#pragma once

#include <cstdint>
#include <string_view>

#include "comm/group.h"
#include "ops/attention.h"
#include "parallel/cp_buffer_plan.h"

namespace mt::cp {

// Throws ConfigError naming the numbers unless the attention's local heads
// split over an all-to-all of U ranks: H divisible by U, and KV divisible by
// U or U by KV. `who` names the setting ("parallel.cp_impl = ulysses (cp 4)").
void check_ulysses_heads(int64_t H, int64_t KV, int U, const char* who);
// The same rule as a test (the planner's search proposes only such layouts).
bool ulysses_heads_split(int64_t H, int64_t KV, int U);

// The buffers of a Ulysses call on an all-to-all group of U ranks, a ring of
// R groups, canonical grain C (0: off), for the local dims d.
CallPlan ulysses_call_plan(const AttentionDims& d, int U, int R, int C, Pass pass);

// Collective over `a2a` (and `ring` when not null and of more than one rank).
void ulysses_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                               const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d, Group& a2a,
                               Group* ring, int C, std::string_view site);
void ulysses_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                const float* lse, const float* q, const float* k, const float* v,
                                const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                                Group& a2a, Group* ring, int C, std::string_view site);

}  // namespace mt::cp
