// Work: waiting for a non-blocking operation, under the watchdog.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "comm/backend.h"
#include "comm/context.h"
#include "comm/group.h"
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

// A rank that waits forever is a hang nobody can read; the watchdog names the
// call instead and ends the whole job.
[[noreturn]] void watchdog_fire(PendingOp& op, double timeout_s) {
  std::fprintf(stderr,
               "meshtrain: watchdog (rank %d): %s on axis %s did not complete within %g s "
               "(step %lld, call site \"%s\", %lld elements)\n",
               op.backend->world_rank(), op.op.c_str(), op.axis.c_str(), timeout_s,
               static_cast<long long>(op.step), op.label.c_str(), static_cast<long long>(op.elements));
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
  for (int i = 0; !op.poll(); ++i) {
    if ((i & 7) != 7) {
      std::this_thread::yield();
      continue;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - begin).count();
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
