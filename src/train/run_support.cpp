#include "train/run_support.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "ckpt/checkpoint_async.h"
#include "comm/context.h"
#include "comm/group.h"
#include "core/error.h"
#include "core/fault_point.h"
#include "core/file.h"
#include "model/llama.h"
#include "ops/primitives.h"

namespace mt {

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  out_.open(path, std::ios::out | std::ios::trunc);
  MT_REQUIRE(out_.good(), IoError, "cannot open metrics file '", path, "' for writing");
}

void MetricsWriter::write(const nlohmann::json& j) {
  write_line(j.dump());
}

void MetricsWriter::write_line(const std::string& line) {
  lines_.push_back(line);
  if (!out_.is_open()) return;
  out_ << line << "\n";
  out_.flush();
}

namespace {

std::string fault_grammar() {
  return "KIND:RANK:STEP[:ARG] with KIND one of throw, bad_alloc, stall, sigterm, sigkill (no ARG), "
         "enospc:RANK:STEP:BYTES, "
         "slow_io:RANK:STEP:SECONDS, slow_copy:RANK:STEP:SECONDS, slow_steps:RANK:STEP:MILLISECONDS, "
         "kill_bytes:RANK:STEP:BYTES, "
         "kill_save:RANK:STEP:POINT (POINT one of " +
         kill_point_list() +
         "), skip_reduce:RANK:STEP:SITE (SITE a linear site, 'layer 1 attn o'); RANK and "
         "STEP non-negative integers";
}

// The whole of `s` as a non-negative integer (digits only), or -1.
int64_t whole_number(const std::string& s) {
  if (s.empty() || s.size() > 18) return -1;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::vector<std::string> split_colons(const std::string& s) {
  std::vector<std::string> parts(1);
  for (char c : s) {
    if (c == ':')
      parts.emplace_back();
    else
      parts.back() += c;
  }
  return parts;
}

}  // namespace

Fault parse_fault(const std::string& text) {
  const std::vector<std::string> p = split_colons(text);
  auto bad = [&](const std::string& why) {
    MT_THROW(ConfigError, "MESHTRAIN_FAULT '", text, "': ", why, "; the accepted grammar is ",
             fault_grammar());
  };
  const std::string& kind = p[0];
  const bool takes_arg = kind == "enospc" || kind == "slow_io" || kind == "slow_copy" ||
                         kind == "slow_steps" || kind == "kill_bytes" || kind == "kill_save" ||
                         kind == "skip_reduce";
  if (kind != "throw" && kind != "bad_alloc" && kind != "stall" && kind != "sigterm" && kind != "sigkill" &&
      !takes_arg)
    bad("unknown kind '" + kind + "'");
  const size_t want = takes_arg ? 4 : 3;
  if (p.size() != want) {
    bad("kind " + kind + " takes " + std::to_string(want) + " fields but " + std::to_string(p.size()) +
        " were given");
  }
  Fault f;
  f.kind = kind;
  const int64_t rank = whole_number(p[1]);
  if (rank < 0 || rank > INT32_MAX) bad("RANK '" + p[1] + "' is not a non-negative integer");
  f.rank = static_cast<int>(rank);
  f.step = whole_number(p[2]);
  if (f.step < 0) bad("STEP '" + p[2] + "' is not a non-negative integer");
  if (kind == "kill_save") {
    if (!is_kill_point(p[3])) bad("POINT '" + p[3] + "' is not a kill point");
    f.point = p[3];
  } else if (kind == "skip_reduce") {
    if (p[3].rfind("layer ", 0) != 0)
      bad("SITE '" + p[3] + "' is not a layer's linear site ('layer 1 attn o')");
    f.point = p[3];
  } else if (takes_arg) {
    const int64_t arg = whole_number(p[3]);
    if (arg < 0) bad("ARG '" + p[3] + "' is not a non-negative integer");
    f.arg = static_cast<double>(arg);
  }
  return f;
}

Fault read_fault() {
  const char* env = std::getenv("MESHTRAIN_FAULT");
  if (env == nullptr) return {};
  return parse_fault(env);
}

void check_fault_fires(const Fault& f, int world_size, const std::string& checkpoint_dir) {
  if (f.kind.empty()) return;
  MT_REQUIRE(f.rank < world_size, ConfigError, "MESHTRAIN_FAULT names rank ", f.rank, " but the world has ",
             world_size, " rank(s) (0-", world_size - 1, "): the fault would never fire");
  MT_REQUIRE(f.kind != "kill_save" || !checkpoint_dir.empty(), ConfigError,
             "MESHTRAIN_FAULT kill_save:", f.rank, ":", f.step, ":", f.point,
             " needs checkpoints to kill a save in: set train.checkpoint_dir (the fault would never fire)");
}

void inject_fault(const Fault& f, int rank, int64_t step) {
  if (f.kind == "slow_steps" && f.rank == rank && step >= f.step)  // every step from STEP on
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(f.arg));
  if (f.kind.empty() || f.rank != rank || f.step != step) return;
  if (f.kind == "throw") MT_THROW(Error, "injected fault (MESHTRAIN_FAULT) at step ", step);
  if (f.kind == "bad_alloc") throw std::bad_alloc();
  if (f.kind == "stall") std::this_thread::sleep_for(std::chrono::hours(1));
  if (f.kind == "sigterm") std::raise(SIGTERM);  // as if a scheduler preempted this rank alone
  if (f.kind == "sigkill") std::raise(SIGKILL);  // as if its machine lost power (comm/lifeline.h)
  if (f.kind == "enospc") set_write_faults({static_cast<int64_t>(f.arg), 0.0});
  if (f.kind == "slow_io") set_write_faults({-1, f.arg});
  if (f.kind == "slow_copy") set_snapshot_copy_delay(f.arg);
  if (f.kind == "kill_save") arm_kill_point(f.point);
  if (f.kind == "kill_bytes") arm_kill_after_bytes(static_cast<int64_t>(f.arg));
  if (f.kind == "skip_reduce") arm_skipped_reduction(f.point);
}

}  // namespace mt

namespace mt {

void require_finite_result(const std::vector<Llama*>& chunks,
                           const std::vector<std::pair<int64_t, double>>& val_losses, const Group* world,
                           bool lead) {
  int64_t bad = 0;
  for (Llama* c : chunks) {
    bad += count_nonfinite(c->store().local_params(), c->store().local_numel());
  }
  if (world != nullptr) {
    Group g = *world;  // a Group is a value; the copy shares the communicator
    g.all_reduce(&bad, 1, "end of run: non-finite parameters");
  }
  const bool bad_eval = !val_losses.empty() && !std::isfinite(val_losses.back().second);
  if (!lead || (bad == 0 && !bad_eval)) return;
  std::string why;
  if (bad > 0) why = std::to_string(bad) + " parameter element(s) are not finite";
  if (bad_eval) {
    why += (why.empty() ? "" : " and ") + std::string("the last validation loss (step ") +
           std::to_string(val_losses.back().first) + ") is " + std::to_string(val_losses.back().second);
  }
  MT_THROW(Error, "the run diverged: ", why, "; nothing was saved (lower train.lr or check the data)");
}

}  // namespace mt

namespace mt {

void wait_for_local_work(const Group* world, double io_timeout_s, const char* what) {
  if (world == nullptr) return;
  Group g = *world;
  CommContext& ctx = g.context();
  const double collective_timeout = ctx.timeout_s;
  ctx.timeout_s = io_timeout_s;
  int64_t nothing = 0;
  const std::string label = std::string("wait for ") + what + " (parallel.io_timeout_s)";
  try {
    g.all_reduce(&nothing, 1, label);
  } catch (...) {
    ctx.timeout_s = collective_timeout;
    throw;
  }
  ctx.timeout_s = collective_timeout;
}

}  // namespace mt
