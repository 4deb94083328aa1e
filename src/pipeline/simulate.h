// Running a schedule without a model: simulate() executes every rank's action
// list with the executor's semantics (schedule.h) and says whether it is
// right, and, with fixed costs per compute action, when each action runs.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.h"

namespace mt::pp {

// Time units per compute action of one virtual stage; communication is free.
// The defaults are the papers' convention: a backward costs two forwards.
// A schedule that splits the backward (Schedule::splits_backward) runs its B as
// `backward` and its W as `weight`; default_costs gives it B = W = 1, so that
// B + W is the fused backward's 2 and the kinds compare at equal work.
struct SimCosts {
  int forward = 1;
  int backward = 2;
  int weight = 1;  // W actions only (split schedules)
};
// {1, 2, 1} for a fused schedule, {1, 1, 1} (F = B = W) for a split one.
SimCosts default_costs(const Schedule& s);

struct SimResult {
  bool ok = false;
  std::string error;  // when !ok: the first broken rule, naming rank, action index, microbatch and stage

  // The rest is filled when ok.
  SimCosts costs;
  // time[r][i]: when rank r runs its action i. Compute: its start (it ends
  // after costs.forward/backward). send_*: when it is posted (the end of the
  // compute before it). recv_*: when it returns (the message is there and the
  // rank has reached it).
  std::vector<std::vector<int>> time;
  int makespan = 0;                 // the end of the last compute action on any rank
  std::vector<int> busy;            // per rank: time units spent computing (m·v·(forward + backward
                                    // [+ weight when split]))
  std::vector<double> bubble;       // per rank: idle fraction of the makespan, (makespan − busy) / makespan
  std::vector<int> peak_in_flight;  // per rank: most (microbatch, stage) pairs at once whose forward is done
                                    // and backward (W when split) not yet: the activation sets the
                                    // executor keeps
  std::vector<int> peak_deferred;   // per rank: most (m, k) whose B is done and W not yet (split only):
                                    // the saved output gradients (Stage::backward_input_slot)
};

// Runs the ranks round-robin, each as far as it can: a send posts its message
// into a mailbox keyed by (src, dst, tag), a receive blocks until its message
// is there; stops when all are done or none can move (deadlock). Checks: every
// action names a stage of its rank and the right peer and tag; every (m, k)
// has exactly one forward and one backward, on rank k % pp; forward(m, k)
// follows the received activation of forward(m, k−1); backward(m, k) follows
// forward(m, k) on the same rank and the received gradient of backward(m, k+1);
// every send has exactly one matching receive and vice versa; for each
// (src, dst, act|grad) the sends are posted in the order of the receives
// (FIFO matching pairs the same messages as tag matching); no deadlock. Then
// checks the timeline against the same dependencies.
// A split schedule (Schedule::splits_backward) also has exactly one W per (m, k), on
// its rank after its B; an unsplit one has none.
SimResult simulate(const Schedule& schedule, SimCosts costs);
SimResult simulate(const Schedule& schedule);  // at default_costs(schedule)

// The bubble of the ideal pipeline with F + B per stage and microbatch:
// (pp − 1) / (v·m + pp − 1), the idle fraction of each rank when the only
// idle time is filling and draining pp stages (the interleaved schedule's
// stages are v times shorter, hence the v·m).
double ideal_bubble(int pp, int v, int microbatches);

// The bubble each kind reaches at default_costs, derived in
// docs/PARALLELISM.md "Pipeline parallelism" and asserted by the pipeline
// tests: ideal_bubble for gpipe, 1f1b and interleaved; zbh1 idles only
// (pp − 1)·(F + B − W) = pp − 1 units of its 3m + pp − 1, (pp − 1)/(3m + pp − 1).
double schedule_bubble(ScheduleKind kind, int pp, int v, int microbatches);

}  // namespace mt::pp
