#include "train/trace.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "core/file.h"
#include "core/trace_spans.h"
#include "train/explain.h"
#include "train/run_support.h"

namespace mt {

namespace {

// Thread ids of a rank's tracks: the main thread's nested spans, then one
// track per communication call in flight at once, the step windows and other
// threads (the async checkpoint writer).
constexpr int kMainTid = 0, kFirstCommTid = 1, kStepTid = 900, kOtherTid = 901;

int64_t parse_step(const std::string& text, const std::string& part, int64_t steps) {
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(part, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MT_REQUIRE(used == part.size() && used > 0 && part[0] != '-' && part[0] != '+', ConfigError,
             "--trace-steps '", text, "': '", part,
             "' is not a step number (give steps and ranges such as 3, 2-4 or 2,5)");
  MT_REQUIRE(v < steps, ConfigError, "--trace-steps '", text, "': step ", v,
             " is not one of the run's steps 0-", steps - 1, " (train.steps = ", steps, ")");
  return v;
}

void add_event(std::string& out, const std::string& name, const char* cat, int pid, int tid, double ts_us,
               double dur_us, const std::string& args) {
  char buf[160];
  std::snprintf(buf, sizeof buf, R"(","cat":"%s","ph":"X","pid":%d,"tid":%d,"ts":%.3f,"dur":%.3f,"args":{)",
                cat, pid, tid, ts_us, std::max(0.0, dur_us));
  out += "{\"name\":\"" + name + buf + args + "}},\n";
}

void add_meta(std::string& out, const char* what, int pid, int tid, const std::string& name) {
  out += std::string("{\"name\":\"") + what + "\",\"ph\":\"M\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":\"" + name + "\"}},\n";
}

// The communication spans on tracks kFirstCommTid + k, each call on the first
// track free at its start, so that no track holds two overlapping calls.
void add_comm_spans(std::string& out, std::vector<TraceSpan> comm, int pid, double origin) {
  std::sort(comm.begin(), comm.end(),
            [](const TraceSpan& a, const TraceSpan& b) { return a.start_s < b.start_s; });
  std::vector<double> track_end;
  for (const TraceSpan& s : comm) {
    size_t k = 0;
    while (k < track_end.size() && track_end[k] > s.start_s)
      ++k;
    if (k == track_end.size()) track_end.push_back(0);
    track_end[k] = s.end_s;
    add_event(out, s.name, "comm", pid, kFirstCommTid + static_cast<int>(k), (s.start_s - origin) * 1e6,
              (s.end_s - s.start_s) * 1e6, s.args);
  }
  for (size_t k = 0; k < track_end.size(); ++k)
    add_meta(out, "thread_name", pid, kFirstCommTid + static_cast<int>(k),
             "comm in flight " + std::to_string(k));
}

std::string process_name(const RunMesh& m) {
  return "rank " + std::to_string(m.rank) + " (dp " + std::to_string(m.dp_rank) + ", pp " +
         std::to_string(m.pp_rank) + ", cp " + std::to_string(m.cp_rank) + ", tp " +
         std::to_string(m.tp_rank) + ")";
}

// This rank's events, times in µs from `origin` (trace_now seconds).
std::string rank_events(const RunMesh& mesh, const std::vector<StepStats>& windows, double origin) {
  const int pid = mesh.rank;
  std::string out;
  add_meta(out, "process_name", pid, 0, process_name(mesh));
  add_meta(out, "thread_name", pid, kMainTid, "main");
  add_meta(out, "thread_name", pid, kStepTid, "steps");
  add_meta(out, "thread_name", pid, kOtherTid, "checkpoint writer");
  for (const StepStats& w : windows)
    add_event(out, "step " + std::to_string(w.step), "step", pid, kStepTid, (w.start_s - origin) * 1e6,
              w.step_time_s * 1e6,
              "\"step\":" + std::to_string(w.step) + ",\"step_time_s\":" + std::to_string(w.step_time_s));
  std::vector<TraceSpan> comm;
  for (TraceSpan& s : SpanRecorder::take_spans()) {
    if (s.cat == "comm") {
      comm.push_back(std::move(s));
      continue;
    }
    add_event(out, s.name, s.cat.c_str(), pid, s.main_thread ? kMainTid : kOtherTid,
              (s.start_s - origin) * 1e6, (s.end_s - s.start_s) * 1e6, s.args);
  }
  add_comm_spans(out, std::move(comm), pid, origin);
  for (const MemorySample& m : SpanRecorder::take_memory()) {
    std::string args;
    for (int k = 0; k < kNumMemKinds; ++k)
      args += (k ? ",\"" : "\"") + std::string(mem_kind_name(static_cast<MemKind>(k))) +
              "\":" + std::to_string(m.bytes[static_cast<size_t>(k)]);
    char buf[96];
    std::snprintf(buf, sizeof buf, R"({"name":"memory bytes","ph":"C","pid":%d,"tid":0,"ts":%.3f,"args":{)",
                  pid, (m.t_s - origin) * 1e6);
    out += buf + args + "}},\n";
  }
  return out;
}

}  // namespace

std::set<int64_t> parse_trace_steps(const std::string& text, int64_t steps) {
  std::set<int64_t> out;
  if (text.empty()) {
    out.insert(steps - 1);
    return out;
  }
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string part = text.substr(begin, comma - begin);
    const size_t dash = part.find('-', 1);
    const int64_t first = parse_step(text, part.substr(0, dash), steps);
    const int64_t last = dash == std::string::npos ? first : parse_step(text, part.substr(dash + 1), steps);
    MT_REQUIRE(first <= last, ConfigError, "--trace-steps '", text, "': the range ", part, " runs backwards");
    for (int64_t s = first; s <= last; ++s)
      out.insert(s);
    begin = comma + 1;
  }
  return out;
}

TraceSession::TraceSession(const RunOptions& opts, int64_t steps) : path_(opts.trace_path) {
  if (on()) steps_ = parse_trace_steps(opts.trace_steps, steps);
}

void TraceSession::begin_step(int64_t step) {
  if (!on() || steps_.count(step) == 0) return;
  recording_ = true;
  SpanRecorder::set_active(true);
}

void TraceSession::end_step(const StepStats& s) {
  if (!recording_) return;
  SpanRecorder::set_active(false);
  recording_ = false;
  windows_.push_back(s);
}

void TraceSession::write(const RunMesh& mesh, double io_timeout_s, bool quiet) {
  if (!on()) return;
  SpanRecorder::set_active(false);
  // One time axis for every rank: the steady clock is the machine's, so on one
  // host the ranks line up; µs from the earliest traced step's start.
  double origin = windows_.empty() ? std::numeric_limits<double>::max() : windows_.front().start_s;
  Group* world = mesh.world();
  if (world) {  // the minimum, as max of the negatives
    double neg = -origin;
    world->all_reduce(&neg, 1, "trace origin", ReduceOp::max);
    origin = -neg;
  }
  const std::string mine = rank_events(mesh, windows_, origin);
  std::string all = world ? gather_to_rank0(*world, mine, "trace") : mine;
  if (mesh.rank == 0) {
    if (all.size() >= 2) all.resize(all.size() - 2);  // the last ",\n"
    const std::string json = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n" + all + "\n]}\n";
    AtomicFile f(path_);
    f.write(json.data(), json.size());
    f.commit();
    if (!quiet) std::printf("trace of %zu step(s) written to %s\n", windows_.size(), path_.c_str());
  }
  if (world) wait_for_local_work(world, io_timeout_s, "the trace's write");
}

}  // namespace mt
