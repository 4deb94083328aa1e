// What the executor (executor.h) needs of a model chunk: forward and backward
// of one microbatch whose activations live in a slot, the buffers a stage
// boundary passes through, and the gradient-accumulation protocol of the
// chunk's parameter store. The model (src/model/llama.h) implements it; this
// folder knows nothing else of the model.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace mt::pp {

class Stage {
 public:
  virtual ~Stage() = default;

  // Forward of one microbatch (inputs, targets [B, T]) with its activations
  // kept in `slot` until its backward. A first stage reads `inputs`; any other
  // reads stage_input(slot), written before the call. A last stage returns its
  // loss sum; any other returns 0 and leaves its output in stage_output(slot).
  virtual double forward_slot(int slot, const int32_t* inputs, const int32_t* targets, int64_t B,
                              int64_t T) = 0;
  // Backward of the microbatch in `slot`: a last stage starts from dloss, any
  // other from output_grad(), written before the call. Afterwards a stage that
  // is not the first finds the gradient of its input in input_grad().
  virtual void backward_slot(int slot, float dloss) = 0;
  // The same backward in two halves, for schedules that split it
  // (Schedule::splits_backward): B, backward_input_slot, computes input_grad() (as
  // backward_slot does) and keeps in the slot what the weight gradients need,
  // touching no gradient; W, backward_weight_slot, later accumulates the
  // weight gradients from it (inside begin_microbatch's protocol), after which
  // the slot is free. B then W gives backward_slot's gradients. A stage that
  // cannot split refuses (the run's start-up rules refuse first).
  virtual void backward_input_slot(int slot, float dloss) {
    (void)slot, (void)dloss;
    MT_CHECK(false, "this stage does not split its backward");
  }
  virtual void backward_weight_slot(int slot) {
    (void)slot;
    MT_CHECK(false, "this stage does not split its backward");
  }
  virtual float* stage_input(int slot) = 0;
  virtual const float* stage_output(int slot) = 0;
  virtual float* output_grad() = 0;
  virtual const float* input_grad() const = 0;
  // Floats of one microbatch's activation (and of its gradient) at a stage boundary.
  virtual int64_t residual_numel(int64_t B, int64_t T) const = 0;

  // Gradient accumulation over a step's microbatches (src/parallel/store.h):
  // begin_step(m) before the step's first microbatch, begin_microbatch(i)
  // before the stage's i-th backward (its W when split) of the step,
  // finish_grads() after its last.
  virtual void begin_step(int64_t microbatches) = 0;
  // The global index (in the step's batch) of the first sequence of the next
  // forward_slot: where the microbatch's rows sit in the one-process batch,
  // which dropout's masks are keyed by (docs/MODEL.md, "Dropout").
  virtual void set_forward_rows(int64_t first_row) { (void)first_row; }
  virtual void begin_microbatch(int64_t index, int64_t microbatch) = 0;  // the store's (store.h)
  virtual void finish_grads() = 0;
};

}  // namespace mt::pp
