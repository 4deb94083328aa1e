// Per-process communication context shared by every Group of the process:
// the comm ledger, the watchdog timeout and the step/phase the run is in (so
// that a stalled collective can be reported with its step and call site).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace mt {

// One recorded call, entered when this rank observes its completion (wait()
// returning, or test() first returning true).
//
// `elements` is this rank's send side, for a group of size P and count n:
//   all_reduce n · all_gather n (this rank's block) · reduce_scatter P·n (the whole input)
//   broadcast n (on every rank, root or not) · all_to_all P·n · all_to_allv Σ send_counts
//   send n · recv n (the message it receives: a recv sends nothing, but the
//   pair's volume is then visible on both sides) · barrier 0.
// `bytes` = elements · element size, always.
struct LedgerEntry {
  std::string op;  // "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "all_to_allv",
                   // "send", "recv", "barrier"
  std::string axis;   // the group's axis name
  std::string label;  // call site
  int64_t elements = 0;
  int64_t bytes = 0;   // elements · element size (see above)
  double seconds = 0;  // wall time from the start of the call to observed completion
  int64_t step = -1;   // CommContext::step when the call started
  // Of `seconds`, the time this rank spent blocked in Work::wait() (a blocking
  // call: nearly all of it); the rest ran behind whatever the rank computed
  // between starting the call and waiting for it.
  double wait_seconds = 0;
  double end_s = 0;  // observed completion on the steady clock (core/trace_spans.h trace_now)
  // The link the group's traffic takes (Group::link): "node" when every rank
  // of the group is on one node, "across" when the group spans nodes, "" when
  // the job's nodes are not known (one process).
  std::string link = {};
};

// Every collective and point-to-point call this process made.
class CommLedger {
 public:
  void record(LedgerEntry e);
  const std::vector<LedgerEntry>& entries() const { return entries_; }
  // Entries of one step.
  std::vector<LedgerEntry> step_entries(int64_t step) const;
  // Σ bytes per (op, axis) over one step (step < 0: over the whole run).
  std::map<std::pair<std::string, std::string>, int64_t> bytes_by_op_axis(int64_t step = -1) const;
  // Σ bytes per link ("node", "across"; see LedgerEntry::link) over one step (step < 0: the whole run).
  std::map<std::string, int64_t> bytes_by_link(int64_t step = -1) const;
  // A table per (op, axis, link): calls, elements, bytes, seconds; then the
  // bytes per link when the job's nodes are known.
  std::string summary() const;
  void clear() { entries_.clear(); }

 private:
  std::vector<LedgerEntry> entries_;
};

class CommContext {
 public:
  CommLedger ledger;
  // Watchdog: a wait that has not seen its operation complete after this many
  // seconds (counted from the start of the wait) prints the call and ends the
  // whole job with MPI_Abort. <= 0 disables it.
  double timeout_s = 300.0;
  int64_t step = -1;  // the training step in progress (for the ledger and the watchdog message)
  // Per MPI world rank, the index of its node (comm/nodes.h NodeMap); empty
  // until the runtime has discovered the nodes.
  std::vector<int> node_of_world_rank;
  std::vector<std::string> node_names;  // per node index, as MPI names it (comm/nodes.h)
};

}  // namespace mt
