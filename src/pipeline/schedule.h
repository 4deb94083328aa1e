// Pipeline schedules as data: a pure function returns, for each pp rank, the
// ordered list of what it does (forward/backward of microbatch m on virtual
// stage k, and the sends and receives around them). An executor runs the
// lists; simulate() (simulate.h) checks them and times them; render_grid()
// (render.h) draws them. Nothing here communicates.
//
// Stages. The model's layers are cut into pp·v virtual stages k = 0 … pp·v−1
// in model order. Virtual stage k lives on pp rank k % pp as its model chunk
// k / pp (Megatron's interleaved placement: rank r holds stages r, r+pp,
// r+2pp, …). With v = 1, stage k is rank k.
//
// Messages. After forward(m, k), k < pp·v−1, the rank posts send_act (vstage k)
// to rank(k+1), which does recv_act (vstage k+1, the receiving stage) right
// before forward(m, k+1). After backward(m, k), k > 0, it posts send_grad
// (vstage k) to rank(k−1), which does recv_grad (vstage k−1) right before
// backward(m, k−1). The last stage computes the loss in its forward, so its
// backward needs no recv_grad; the first stage reads tokens, so it has no
// recv_act and no send_grad. Sends are non-blocking (posted here, completed
// later); receives block until their message has arrived.
//
// Matching. Every message carries tag = message_tag(m, k_sender, grad), unique
// per (microbatch, sending stage, direction), so an executor may match by tag.
// The lists also guarantee FIFO order: for each (src, dst, act|grad) the order
// in which src posts its sends equals the order in which dst posts the matching
// receives (simulate() checks it), so matching in order gives the same pairs.
// Tags run up to 2·m·pp·v − 1; MPI guarantees tags up to 32767 (MPI_TAG_UB,
// Open MPI allows 2^31−1).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mt::pp {

enum class ScheduleKind {
  gpipe,        // all forwards, then all backwards (GPipe); v = 1
  one_f_one_b,  // PipeDream-flush / Megatron non-interleaved 1F1B; v = 1
  interleaved,  // Megatron interleaved 1F1B over v ≥ 2 model chunks per rank
  zbh1,         // zero bubble H1: 1F1B with each backward split into B (input gradient) and W (weight
                // gradients), the W's deferred into the cool-down's idle time; v = 1
};

// "gpipe" | "1f1b" | "interleaved" | "zbh1"; ConfigError naming the value otherwise.
ScheduleKind parse_schedule_kind(std::string_view s);
const char* schedule_kind_name(ScheduleKind kind);  // the inverse of parse_schedule_kind

// backward: the whole backward of (m, k) when the schedule does not split it,
// else its B (the input gradient only); weight: the W of (m, k), the weight
// gradients from what B left in the slot (split schedules only, after B).
enum class Op { recv_act, forward, send_act, recv_grad, backward, send_grad, weight };
const char* op_name(Op op);  // "recv_act", "forward", …

struct Action {
  Op op;
  int microbatch;  // 0 … m−1
  int vstage;  // virtual stage k in [0, pp·v); for recv_* the receiving stage, for send_* the sending one
  int peer;    // pp rank sent to / received from for send_*/recv_*; −1 for forward/backward.
               // Equal to the rank itself only when pp = 1 (interleaved): the rank messages itself.
  int tag;     // message_tag(...) of the message sent or received; −1 for forward/backward
};

// The tag of the message that stage k_sender sends for microbatch m:
// 2·(m·n_stages + k_sender) + (grad ? 1 : 0), where n_stages = pp·v.
int message_tag(int microbatch, int k_sender, bool grad, int n_stages);

struct Schedule {
  ScheduleKind kind;
  int pp, v, microbatches;
  std::vector<std::vector<Action>> ranks;  // ranks[r]: pp rank r's actions, in order

  int n_stages() const { return pp * v; }
  // Whether backward means B only and each (m, k) has a W (split_backward(kind)).
  bool splits_backward() const;
  // The action that accumulates (m, k)'s weight gradients and frees its
  // activation slot: weight when split, else backward.
  Op grad_op() const { return splits_backward() ? Op::weight : Op::backward; }
  int rank_of(int vstage) const { return vstage % pp; }
  int chunk_of(int vstage) const { return vstage / pp; }
};

// Whether the kind splits each backward into B and W (zbh1).
bool split_backward(ScheduleKind kind);

// The start-up rules, each failure a ConfigError naming the numbers:
// pp, v, microbatches ≥ 1; n_layers ≥ pp·v (every virtual stage needs a layer;
// pass n_layers < 0 to skip this rule); v > 1 only with the interleaved kind;
// interleaved needs v ≥ 2 and microbatches a multiple of pp; 1f1b and zbh1
// need microbatches ≥ pp.
void validate_schedule(ScheduleKind kind, int pp, int v, int microbatches, int n_layers);

// What a split schedule (split_backward) needs of the run, as the model
// builds the split (model/llama_split.cpp) today: tp 1 (the linear plan's
// input gradients under tp are not split yet), cp 1, no experts, no
// recomputation. A ConfigError naming the key, the value and the schedule
// otherwise; nothing for the other kinds.
struct SplitRun {
  int64_t tp = 1, cp = 1;
  bool experts = false, recompute = false;
};
void check_split_schedule(ScheduleKind kind, const SplitRun& run);

// Each rank's action list (validate_schedule without the n_layers rule first).
//   gpipe: forwards of microbatches 0 … m−1, then backwards m−1 … 0 (reversed,
//     as in the GPipe paper's figure: the last microbatch's gradient is the
//     first to come back).
//   1f1b: rank s does min(pp−s−1, m) warm-up forwards, then alternates one
//     forward and one backward, then the remaining backwards; microbatches in
//     order in both directions. At most pp−s activation sets in flight.
//   interleaved: the m·v (microbatch, chunk) pairs in Megatron's order —
//     microbatches in groups of pp, each group through chunk 0, 1, …, v−1
//     forward and v−1, …, 0 backward; (pp−s−1)·2 + (v−1)·pp warm-up forwards
//     (at most m·v), then 1F1B over the pairs, then the cool-down backwards.
//     (Megatron runs all forwards first when m = pp because its paired
//     send/recv calls would otherwise block; with non-blocking sends the
//     formula needs no such case, and simulate() checks it.)
//   zbh1: 1f1b's order of forwards and B's; rank s defers each W by s
//     microbatches (W(i − s) right after B(i)), and in the cool-down runs one
//     deferred W after each B, then the rest: at most pp activation sets in
//     flight on every rank (1F1B's peak, stage 0's), the W's filling the
//     cool-down's waits (bubble (pp − 1)/(3m + pp − 1) at F = B = W = 1).
Schedule make_schedule(ScheduleKind kind, int pp, int v, int microbatches);

}  // namespace mt::pp
