// The executor: runs one rank's action list of a schedule (schedule.h) on its
// stages (stage.h), with non-blocking point-to-point transfers between pp
// ranks. Every training step goes through it: without pipeline parallelism
// the schedule is one_stage_schedule(m), one stage and no transfers.
//
// Virtual stage k of pp·v lives on pp rank k % pp as that rank's chunk k / pp
// (Megatron's interleaved placement; v = 1 is the plain pipeline).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "comm/group.h"
#include "core/exact_sum.h"
#include "core/tensor.h"
#include "pipeline/schedule.h"
#include "pipeline/stage.h"

namespace mt::pp {

// The schedule of a step without pipeline parallelism: one stage running
// forward 0, backward 0, forward 1, backward 1, … (1F1B with pp = 1), so that
// one microbatch's activations are live at a time.
Schedule one_stage_schedule(int microbatches);

// One compute or transfer span of the last step, for --trace and the bubble.
struct Span {
  std::string name;  // "F3" (forward of microbatch 3), "B3", "send act", "recv grad", ...
  int vstage = 0;
  double start_s = 0, end_s = 0;  // from the start of the step's actions
};

class Executor {
 public:
  // chunks[c]: this rank's stage for virtual stage c·pp + pp_rank. pp: the
  // pipeline group (null when schedule.pp = 1). mb, T: the microbatch shape.
  // Each chunk's activation slots are reused across steps.
  Executor(Schedule schedule, int pp_rank, Group* pp, std::vector<Stage*> chunks, int64_t mb, int64_t T);

  // One step's forwards and backwards, and the gradient accumulation around
  // them: every chunk's begin_step(microbatches), then this rank's actions, a
  // chunk's begin_microbatch(i) right before its i-th backward, then every
  // chunk's finish_grads(). inputs/targets: this data-parallel rank's rows,
  // microbatch m at offset m·mb·T. The loss is the sum over the global batch
  // divided by valid_tokens (its valid targets, summed over every rank); with
  // none, nothing is computed. Returns the last stage's loss sum (0 elsewhere).
  double run(const int32_t* inputs, const int32_t* targets, int64_t valid_tokens);
  // The same loss sum, the microbatches' sums added exactly (core/exact_sum.h):
  // the canonical mode's loss, the same bits however the microbatches are split.
  const ExactSum& loss_exact() const { return loss_exact_; }
  // The global index of this rank's first row in the step's batch (the data-
  // parallel rank's offset): microbatch m's rows start at first_row + m·mb.
  void set_first_row(int64_t first_row) { first_row_ = first_row; }

  // A forward through every stage, for evaluation: the virtual stages in
  // order, each receiving its input from the previous one (blocking), the last
  // computing the loss. Uses slot 0. Returns the loss sum on every rank of pp.
  double forward_loss(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T);

  const Schedule& schedule() const { return schedule_; }
  int64_t first_row() const { return first_row_; }
  const std::vector<Span>& spans() const { return spans_; }
  double busy_s() const { return busy_s_; }  // forward + backward time of the last run
  double wall_s() const { return wall_s_; }  // the last run's actions, start to end

  // Receives are posted ahead, up to kRecvAhead at a time, into pooled
  // buffers, so that a message can land while this rank computes; the recv
  // action then waits for it and copies it where the stage reads it.
  static constexpr size_t kRecvAhead = 2;

  // The transfer buffers a run of `actions` (one rank's) allocates, each
  // holding one residual (Stage::residual_numel), all comm: `recvs` buffers of
  // posted receives (kRecvAhead at most, pooled across steps), and between
  // `least_sends` and `most_sends` gradient send buffers (one, reused, when
  // each send has completed by the next; one per send when none has). The
  // run allocates from it (post_receives posts `recvs`; a send buffer beyond
  // `most_sends` stops the run) and the memory model (cost/memory_model.cpp
  // add_pipeline) counts it (docs/ARCHITECTURE.md "Sizes are data").
  struct TransferPlan {
    int64_t recvs = 0, least_sends = 0, most_sends = 0;
  };
  static TransferPlan transfer_plan(const std::vector<Action>& actions);

 private:
  struct SendBuffer {
    Tensor data;
    Work work;
  };
  // A buffer no pending send uses (Open MPI is fastest through reused ones).
  SendBuffer& send_buffer(int64_t n);
  struct PostedRecv {
    size_t action = 0;  // index in this rank's action list
    Tensor buf;
    Work work;
  };
  void post_receives(const std::vector<Action>& actions);
  void take_receive(size_t action, float* dst, int64_t n);
  double run_actions(const int32_t* inputs, const int32_t* targets, float dloss);
  // A backward (fused, or a split one's B) or a W; backwards: the chunk's count of them so far.
  void run_backward(const Action& a, int64_t& backwards, float dloss);
  int take_slot(int chunk, int microbatch);
  Group& pp() const;

  Schedule schedule_;
  int pp_rank_;
  Group* pp_;
  std::vector<Stage*> chunks_;
  int64_t mb_, T_;
  int64_t first_row_ = 0;
  std::vector<std::vector<int>> slot_of_;     // [chunk][microbatch] → activation slot (−1: none)
  std::vector<std::vector<int>> free_slots_;  // [chunk]
  std::vector<int> slots_made_;               // [chunk]
  TransferPlan transfers_;                    // of this rank's actions
  std::vector<SendBuffer> send_buffers_;
  std::vector<Work> act_sends_;
  std::deque<PostedRecv> posted_;
  std::vector<Tensor> recv_pool_;
  size_t next_recv_ = 0;  // the next action to consider for posting
  std::vector<Span> spans_;
  double busy_s_ = 0, wall_s_ = 0;
  ExactSum loss_exact_;
};

}  // namespace mt::pp
