// Context parallelism (CP): the tokens of each sequence are split over the cp
// axis, and attention, the one layer that mixes tokens, is made exact again by
// moving keys and values between the ranks (docs/PARALLELISM.md, "Context parallelism").
//
// Zigzag layout. A sequence of T tokens is cut into 2·cp chunks of
// c = T/(2·cp); rank r holds chunk r followed by chunk 2·cp−1−r, so that every
// rank has the same amount of causal work (an early and a late chunk):
//
//   T = 16, cp = 2 (c = 4):  rank 0: 0..3, 12..15   rank 1: 4..7, 8..11
//
// Attention. Queries stay on their rank; each rank needs the keys/values of
// every token its queries can see. Two ways to get them, same contract:
//
//   ring_attention_*       the k/v block (and its positions) travels around
//                          the ring rank → rank+1; at each step a rank attends
//                          its queries to the block it holds while the next
//                          block is in flight, and merges the partial result by
//                          log-sum-exp (online softmax). Memory: 2 blocks.
//   allgather_attention_*  all-gather K/V over cp, attend once, reduce-scatter
//                          dK/dV in the backward. Memory: all cp blocks.
//
// Arguments follow ops/attention.h: AttentionDims d describes this rank's
// local tokens (q_len = kv_len = Tl = T/cp tokens per sequence, the same on
// every rank), with its strides (q, k, v may live in one fused qkv buffer with
// row stride (H + 2·KV)·D); q_pos [B, Tl] and k_pos [B, Tl] are GLOBAL
// positions (key j visible to query i iff k_pos[j] <= q_pos[i]), so any token
// layout works; zigzag is the balanced one. Every function is collective over
// `cp`. The saved lse is that of the attention over the whole sequence.
//
// Gradients follow attention_backward: dq, dk and dv are ACCUMULATED (+=) in
// the caller's strided buffers, with the contributions of every rank's queries
// to this rank's keys arriving in dk/dv. Zero them first for plain gradients.
//
// Ledger (`site` names the call site; labels as tp::comm_label), with
// n_kv = B·Tl·KV·D floats:
//   ring forward   cp−1 × (send + recv) of the packed block [k | v | k_pos]:
//                  2·n_kv + B·Tl f32 elements (positions bit-copied into f32 slots),
//                  label "<site>: ring_attention k,v,pos forward [B, Tl, 2·KV·D + 1]".
//   ring backward  the same cp−1 k/v/pos exchanges ("… backward"), and cp−1 ×
//                  (send + recv) of the travelling [dk | dv]: 2·n_kv f32,
//                  "<site>: ring_attention dk,dv backward [B, Tl, 2·KV·D]".
//   all-gather     forward 1 all_gather of 2·n_kv + B·Tl; backward the same
//                  all_gather again (K/V are re-gathered, not kept) and 1
//                  reduce_scatter of cp·2·n_kv elements.
//
// Buffers: every tracked buffer a call allocates is an entry of its buffer
// plan (cp_buffer_plan.h call_plan), the sizes the memory model reads too.
#pragma once

#include <cstdint>
#include <string_view>

#include "comm/group.h"
#include "ops/attention.h"

namespace mt::cp {

// The attention strategy (parallel.cp_impl): "ring" or "allgather" (below),
// "ulysses" or "hybrid" (cp_ulysses.h); ConfigError naming the value otherwise.
enum class CpImpl { ring, allgather, ulysses, hybrid };
CpImpl parse_cp_impl(std::string_view name);
// "ring", "allgather", "ulysses", "hybrid".
const char* cp_impl_name(CpImpl impl);

// ---- zigzag layout ----

// Throws ConfigError unless T is divisible by 2·cp (and cp >= 1):
// "train.seq_len (10) must be divisible by 2 x parallel.cp (4) = 8 ...";
// `seq_name` and `cp_name` name the two values as the user gave them (eval's
// "--seq-len" and "--cp").
void check_zigzag(int64_t T, int cp, const char* seq_name = "train.seq_len",
                  const char* cp_name = "parallel.cp");

// pos[T/cp] ← the global positions (0-based) rank `rank` holds, in local order:
// chunk rank, then chunk 2·cp−1−rank.
void zigzag_positions(int32_t* pos, int64_t T, int cp, int rank);

// out[B, T/cp, width] ← this rank's rows of in[B, T, width], in local order.
void zigzag_slice(float* out, const float* in, int64_t B, int64_t T, int64_t width, int cp, int rank);
void zigzag_slice(int32_t* out, const int32_t* in, int64_t B, int64_t T, int64_t width, int cp, int rank);

// The inverse: writes this rank's rows of out[B, T, width] from in[B, T/cp, width]
// (the other rows are untouched; every rank's call together fill out).
void zigzag_unslice(float* out, const float* in, int64_t B, int64_t T, int64_t width, int cp, int rank);
void zigzag_unslice(int32_t* out, const int32_t* in, int64_t B, int64_t T, int64_t width, int cp, int rank);

// ---- distributed attention ----

// What one call did on this rank (for tests and --explain).
struct CpStats {
  int64_t blocks_attended = 0;  // attention_forward/_backward calls on a key/value block
  int64_t blocks_skipped = 0;   // blocks no local query can see (min key pos > max query pos,
                                // in every sequence): neither computed nor merged
  int64_t exchanges = 0;        // ring: send + recv pairs; all-gather variant: collectives
};

// Forward: out [B, Tl, out_stride] and lse [B, H, Tl] assigned, as attention_forward
// over all T keys of the sequence. q [B, Tl, q_stride], k, v [B, Tl, kv_stride].
CpStats ring_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                               const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d, Group& cp,
                               std::string_view site);

// Backward, from the final out and lse of the forward. dq [B, Tl, q_stride] +=
// over every block; dk, dv [B, Tl, kv_stride] += the gradients of this rank's
// keys/values from the queries of all ranks.
//
// Scheme: the k/v block of rank o travels o → o+1 → … as in the forward. The
// owner adds its own queries' terms straight into dk/dv at step 0. From step 1
// on, each visited rank adds its queries' terms to a travelling [dk | dv]
// buffer that follows the block one step behind (it is sent after the compute
// of that step); after rank o−1 (step cp−1) it is sent once more and so arrives
// at o, which adds it to dk/dv. cp−1 k/v hops and cp−1 dk/dv hops in all.
CpStats ring_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                const float* lse, const float* q, const float* k, const float* v,
                                const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d, Group& cp,
                                std::string_view site);

// Same contracts, by all-gathering K/V and positions over cp (one attention call
// over all cp·Tl keys) and, in the backward, reduce-scattering dK/dV to their owners.
CpStats allgather_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                    const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                                    Group& cp, std::string_view site);
CpStats allgather_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                     const float* lse, const float* q, const float* k, const float* v,
                                     const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                                     Group& cp, std::string_view site);

}  // namespace mt::cp
