// Drawing a simulated schedule as the papers do: one row per rank, one column
// per time unit.
#pragma once

#include <string>

#include "pipeline/schedule.h"
#include "pipeline/simulate.h"

namespace mt::pp {

// The grid, then one line per rank: busy and idle time units, the bubble
// (idle fraction of the makespan), the ideal bubble (ideal_bubble) and the
// peak activation sets in flight. A cell is `F3` / `B3` (forward / backward of
// microbatch 3), with the model chunk as a letter when v > 1 (`F3a` on chunk
// 0, `F3b` on chunk 1, …; `F3.27` past 26 chunks), repeated over every time
// unit the action takes (a backward fills two columns); `.` is idle.
// `sim` must be simulate(schedule)'s result and ok.
std::string render_grid(const Schedule& schedule, const SimResult& sim);

}  // namespace mt::pp
