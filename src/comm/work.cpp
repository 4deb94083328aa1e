// Work: waiting for a non-blocking operation, under the watchdog.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "comm/backend.h"
#include "comm/context.h"
#include "comm/group.h"
#include "comm/lifeline.h"
#include "core/trace_spans.h"

namespace mt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_of(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// With --trace on this step: the call's flight from start to completion (a
// "comm" span) and, when this rank blocked on it, its wait (a "wait" span).
void trace(const PendingOp& op, const LedgerEntry& e) {
  char buf[160];
  std::snprintf(buf, sizeof buf, R"("op":"%s","axis":"%s","bytes":%lld,"elements":%lld,"wait_us":%.3f,)",
                op.op.c_str(), op.axis.c_str(), static_cast<long long>(e.bytes),
                static_cast<long long>(e.elements), e.wait_seconds * 1e6);
  std::string label;
  for (char c : op.label)  // JSON-safe: call sites are plain text
    if (c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20) label += c;
  const std::string args = buf + std::string(R"("label":")") + label + "\"";
  SpanRecorder::add({op.op + " " + op.axis, "comm", seconds_of(op.start), e.end_s, true, args});
  if (e.wait_seconds > 0)
    SpanRecorder::add(
        {"wait " + op.op + " " + op.axis, "wait", e.end_s - e.wait_seconds, e.end_s, true, args});
}

void record(PendingOp& op) {
  if (op.recorded) return;
  op.recorded = true;
  const Clock::time_point end = Clock::now();
  LedgerEntry e;
  e.op = op.op;
  e.axis = op.axis;
  e.link = op.link;
  e.label = op.label;
  e.elements = op.elements;
  e.bytes = op.bytes;
  e.seconds = std::chrono::duration<double>(end - op.start).count();
  e.wait_seconds = op.waited;
  e.end_s = seconds_of(end);
  e.step = op.step;
  if (SpanRecorder::active()) trace(op, e);
  op.ctx->ledger.record(std::move(e));
}

// "world rank 2" on the world, "world rank 2 (dp rank 1)" on a sub-group.
std::string rank_name(const PendingOp& op, int r) {
  const std::string world = "world rank " + std::to_string(op.backend->world_rank_of(r));
  return op.axis == "world" ? world : world + " (" + op.axis + " rank " + std::to_string(r) + ")";
}

// A wait that has lasted announce_after(timeout) tells the other ranks it has
// arrived (Backend::announce_wait); a firing watchdog listens for `grace_s` more,
// so that every rank that reached the call before the timeout has been heard.
double announce_after(double timeout_s) {
  return std::min(1.0, timeout_s / 4);
}

void announce_on_lifeline(const PendingOp& op) {
  std::vector<int> to;
  for (int r = 0; r < op.backend->size(); ++r)
    if (r != op.backend->rank()) to.push_back(op.backend->world_rank_of(r));
  lifeline_announce(op.axis, op.seq, op.label, to);
}

// Who the stalled call waits for: a send's or recv's other side, or the ranks
// of a collective that never announced waiting in it (and any that announced
// a later one: they passed it, so the ranks disagree on the order of calls).
std::string roll_call(PendingOp& op, double grace_s) {
  if (op.seq < 0) {
    return "; waiting for " + rank_name(op, op.partner) + " to " +
           (op.op == "send" ? "receive the message" : "send the message");
  }
  std::vector<int64_t> heard;
  try {
    const auto until = Clock::now() + std::chrono::duration<double>(grace_s);
    do {
      heard = op.backend->heard_waits();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (Clock::now() < until);
    heard = op.backend->heard_waits();
  } catch (const std::exception&) {  // the message goes out without the roll call
    return "";
  }
  const int me = op.backend->rank();
  std::string missing, waiting, ahead;
  for (int r = 0; r < static_cast<int>(heard.size()); ++r) {
    // The word on the lifeline (its own connection) where MPI's is behind.
    const HeardWait lw = lifeline_heard(op.axis, op.backend->world_rank_of(r));
    const int64_t h = std::max(heard[static_cast<size_t>(r)], lw.seq);
    std::string& list = r == me || h == op.seq ? waiting : h > op.seq ? ahead : missing;
    list += (list.empty() ? "" : ", ") + rank_name(op, r);
    if (r != me && h >= 0 && h < op.seq && lw.seq == h) {
      list += " (last heard waiting " + std::to_string(op.seq - h) +
              " collective(s) of the axis before this one, call site \"" + lw.label + "\")";
    }
  }
  if (heard.empty()) return "";
  std::string out = "; never arrived: " + (missing.empty() ? std::string("none") : missing);
  out += "; waiting in it: " + waiting;
  if (!ahead.empty()) out += "; waiting in a later collective of axis " + op.axis + ": " + ahead;
  if (missing.empty() && ahead.empty()) out += "; every rank is in it: its data is what stalls";
  return out;
}

// The two (or more) sides of a stalled call that crosses nodes, by node: a
// link that slowed or broke between them stalls a call in which every rank
// arrived. "" when the call stays inside one node or the nodes are unknown.
std::string sides(const PendingOp& op) {
  const std::vector<int>& node_of = op.ctx->node_of_world_rank;
  const std::vector<std::string>& names = op.ctx->node_names;
  if (op.link != "across" || node_of.empty() || names.empty()) return "";
  std::vector<int> ranks;
  if (op.seq < 0) {
    ranks = {op.backend->rank(), op.partner};
  } else {
    for (int r = 0; r < op.backend->size(); ++r)
      ranks.push_back(r);
  }
  std::vector<std::string> by_node(names.size());
  for (int r : ranks) {
    const int w = op.backend->world_rank_of(r);
    std::string& list = by_node[static_cast<size_t>(node_of[static_cast<size_t>(w)])];
    list += (list.empty() ? "" : ", ") + std::to_string(w);
  }
  std::vector<std::string> parts;
  for (size_t n = 0; n < names.size(); ++n) {
    if (by_node[n].empty()) continue;
    const bool one = by_node[n].find(',') == std::string::npos;
    parts.push_back("node " + names[n] + " (world rank" + (one ? " " : "s ") + by_node[n] + ")");
  }
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i)
    out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return "; the call crosses the link between " + out;
}

// A rank that waits forever is a hang nobody can read; the watchdog names the
// call and the ranks it waits for instead, and ends the whole job.
[[noreturn]] void watchdog_fire(PendingOp& op, double timeout_s) {
  const std::string who = roll_call(op, announce_after(timeout_s) + 0.25) + sides(op);
  std::fprintf(stderr,
               "meshtrain: watchdog (rank %d): %s on axis %s did not complete within %g s "
               "(step %lld, call site \"%s\", %lld elements)%s\n",
               op.backend->world_rank(), op.op.c_str(), op.axis.c_str(), timeout_s,
               static_cast<long long>(op.step), op.label.c_str(), static_cast<long long>(op.elements),
               who.c_str());
  std::fflush(stderr);
  op.backend->abort_job(1);
  std::_Exit(1);  // not reached: abort_job does not return
}

// Polls until complete. Open MPI moves a large message one fragment per poll,
// so a wait first polls back to back, yielding the core between polls
// (sched_yield) rather than sleeping: a sleep of even 1 ms per fragment capped a
// 64 MiB all-reduce at ~0.2 GB/s. When other ranks share the core (8 ranks on 2
// cores) the yield hands it to them. Past kSpinSeconds the wait is a stall (a
// peer still computing, or hung): sleep 200 µs between polls, until the
// watchdog's timeout. The spell of yields is short because a yielding rank stays
// runnable: on a loaded machine each second of it cost up to a second of CPU
// that the other jobs, and through the scheduler's balancing our own slower
// rank, did not get (docs/BENCHMARKS.md, "dp2 against PyTorch DDP").
constexpr double kSpinSeconds = 0.02;

void wait_for(PendingOp& op) {
  const double timeout_s = op.ctx->timeout_s;
  const auto begin = Clock::now();
  bool announced = op.seq < 0 || timeout_s <= 0;  // only a collective under a watchdog announces
  for (int i = 0; !op.poll(); ++i) {
    if ((i & 7) != 7) {
      std::this_thread::yield();
      continue;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - begin).count();
    if (!announced && waited > announce_after(timeout_s)) {
      op.backend->announce_wait(op.seq);
      announce_on_lifeline(op);
      announced = true;
    }
    if (timeout_s > 0 && waited > timeout_s) watchdog_fire(op, timeout_s);
    if (waited > kSpinSeconds) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  op.waited += std::chrono::duration<double>(Clock::now() - begin).count();
  record(op);
}

// Destructors cannot throw: a failure while finishing an abandoned operation
// ends the job with the message rather than std::terminate without one.
void finish_quietly(Work& w, const std::shared_ptr<PendingOp>& op) {
  try {
    w.wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshtrain: error (rank %d): %s\n", op->backend->world_rank(), e.what());
    std::fflush(stderr);
    op->backend->abort_job(1);
  }
}

}  // namespace

Work::~Work() {
  if (op_) finish_quietly(*this, std::shared_ptr<PendingOp>(op_));
}

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    if (op_) finish_quietly(*this, std::shared_ptr<PendingOp>(op_));
    op_ = std::move(other.op_);
  }
  return *this;
}

void Work::wait() {
  if (!op_) return;
  // Taken out first: after a failed wait the Work is empty, so that its
  // destructor does not wait for the failed operation again.
  std::shared_ptr<PendingOp> op = std::move(op_);
  wait_for(*op);
}

bool Work::test() {
  if (!op_) return true;
  std::shared_ptr<PendingOp> op = std::move(op_);
  if (!op->poll()) {
    op_ = std::move(op);
    return false;
  }
  record(*op);
  return true;
}

}  // namespace mt
