// Pipeline parallelism: how the layers are split into stages, and the
// executor that runs one rank's part of a schedule (src/pipeline/schedule.h)
// on its model chunks with non-blocking point-to-point transfers.
//
// Virtual stage k of pp·v lives on pp rank k % pp as that rank's chunk k / pp
// (Megatron's interleaved placement; v = 1 is the plain pipeline). Stage 0 also
// holds the embedding, the last stage the final norm, the LM head and the loss.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "comm/group.h"
#include "core/tensor.h"
#include "model/llama.h"
#include "pipeline/schedule.h"

namespace mt {

// The layers of each virtual stage (pp::stage_layer_counts: an even split, or
// parallel.stage_layers), stage 0 with the embedding, the last with the head.
std::vector<StageRange> split_stages(int64_t n_layers, int pp, int v, const std::string& explicit_layers);

// One line per virtual stage: "stage 1 (pp rank 1, chunk 0): layers 4-7 + norm, head, loss".
std::string stage_map(const std::vector<StageRange>& stages, int pp);

// One compute or transfer span of the last step, for --trace and the bubble.
struct PipeSpan {
  std::string name;  // "F3" (forward of microbatch 3), "B3", "send act", "recv grad", ...
  int vstage = 0;
  double start_s = 0, end_s = 0;  // from the start of the step's pipeline phase
};

class PipelineExecutor {
 public:
  // chunks[c]: this rank's model for virtual stage c·pp + pp_rank. mb, T: the
  // microbatch shape. Each chunk's activation slots are reused across steps.
  PipelineExecutor(const pp::Schedule& schedule, int pp_rank, Group& pp, std::vector<Llama*> chunks,
                   int64_t mb, int64_t T);

  // Runs this rank's actions for one step. inputs/targets: this data-parallel
  // rank's rows, microbatch m at offset m·mb·T. Returns the last stage's loss
  // sum (0 on other ranks).
  double run(const int32_t* inputs, const int32_t* targets, float dloss);

  const std::vector<PipeSpan>& spans() const { return spans_; }
  double busy_s() const { return busy_s_; }  // forward + backward time of the last run
  double wall_s() const { return wall_s_; }  // the last run, start to end

 private:
  struct SendBuffer {
    Tensor data;
    Work work;
  };
  SendBuffer& send_buffer(
      int64_t n);  // a buffer no pending send uses (Open MPI is fastest through reused ones)
  // Receives are posted ahead, up to kRecvAhead at a time, into pooled
  // buffers, so that a message can land while this rank computes; the recv
  // action then waits for it and copies it where the stage reads it.
  static constexpr size_t kRecvAhead = 2;
  struct PostedRecv {
    size_t action = 0;  // index in this rank's action list
    Tensor buf;
    Work work;
  };
  void post_receives(const std::vector<pp::Action>& actions);
  void take_receive(size_t action, float* dst, int64_t n);
  int chunk_of(int vstage) const { return vstage / schedule_.pp; }

  const pp::Schedule& schedule_;
  int pp_rank_;
  Group& pp_;
  std::vector<Llama*> chunks_;
  int64_t mb_, T_;
  std::vector<std::vector<int>> slot_of_;     // [chunk][microbatch] → activation slot (−1: none)
  std::vector<std::vector<int>> free_slots_;  // [chunk]
  std::vector<int> slots_made_;               // [chunk]
  std::vector<SendBuffer> send_buffers_;
  std::vector<Work> act_sends_;
  std::deque<PostedRecv> posted_;
  std::vector<Tensor> recv_pool_;
  size_t next_recv_ = 0;  // the next action to consider for posting
  std::vector<PipeSpan> spans_;
  double busy_s_ = 0, wall_s_ = 0;
};

// A forward through every stage, for evaluation: the virtual stages in order,
// each receiving its input from the previous one (blocking), the last
// computing the loss. Returns the loss sum on every rank of the pp group.
double pipeline_forward_loss(const std::vector<Llama*>& chunks, int pp_rank, Group& pp, const int32_t* inputs,
                             const int32_t* targets, int64_t B, int64_t T);

// Chrome-trace JSON (Perfetto): one process per rank with its spans of the
// last step. Collective over `world`; rank 0 returns the merged file's text.
std::string pipeline_trace_json(Group& world, int rank, const std::vector<PipeSpan>& spans);

}  // namespace mt
