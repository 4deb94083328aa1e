#include "pipeline/schedule.h"

#include <algorithm>

#include "core/error.h"

namespace mt::pp {

ScheduleKind parse_schedule_kind(std::string_view s) {
  if (s == "gpipe") return ScheduleKind::gpipe;
  if (s == "1f1b") return ScheduleKind::one_f_one_b;
  if (s == "interleaved") return ScheduleKind::interleaved;
  if (s == "zbh1") return ScheduleKind::zbh1;
  MT_THROW(ConfigError, "unknown pipeline schedule '", s, "': use gpipe, 1f1b, interleaved or zbh1");
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe:
      return "gpipe";
    case ScheduleKind::one_f_one_b:
      return "1f1b";
    case ScheduleKind::interleaved:
      return "interleaved";
    case ScheduleKind::zbh1:
      return "zbh1";
  }
  return "?";
}

bool split_backward(ScheduleKind kind) {
  return kind == ScheduleKind::zbh1;
}

bool Schedule::splits_backward() const {
  return split_backward(kind);
}

const char* op_name(Op op) {
  switch (op) {
    case Op::recv_act:
      return "recv_act";
    case Op::forward:
      return "forward";
    case Op::send_act:
      return "send_act";
    case Op::recv_grad:
      return "recv_grad";
    case Op::backward:
      return "backward";
    case Op::send_grad:
      return "send_grad";
    case Op::weight:
      return "weight";
  }
  return "?";
}

int message_tag(int microbatch, int k_sender, bool grad, int n_stages) {
  return 2 * (microbatch * n_stages + k_sender) + (grad ? 1 : 0);
}

void validate_schedule(ScheduleKind kind, int pp, int v, int microbatches, int n_layers) {
  const char* name = schedule_kind_name(kind);
  MT_REQUIRE(pp >= 1, ConfigError, "pp (", pp, ") must be at least 1");
  MT_REQUIRE(v >= 1, ConfigError, "v (", v, ") model chunks per rank must be at least 1");
  MT_REQUIRE(microbatches >= 1, ConfigError, "microbatches (", microbatches, ") must be at least 1");
  MT_REQUIRE(n_layers < 0 || n_layers >= pp * v, ConfigError, "n_layers (", n_layers,
             ") must be at least pp (", pp, ") x v (", v, ") = ", pp * v,
             ": every virtual pipeline stage needs a layer");
  if (kind == ScheduleKind::interleaved) {
    MT_REQUIRE(v >= 2, ConfigError,
               "the interleaved schedule needs v >= 2 model chunks per rank, got v = ", v,
               " (with one chunk per rank use 1f1b)");
    MT_REQUIRE(microbatches % pp == 0, ConfigError, "microbatches (", microbatches,
               ") must be a multiple of pp (", pp,
               ") for the interleaved schedule: microbatches go through the chunks in groups of pp");
  } else {
    MT_REQUIRE(v == 1, ConfigError, "v (", v, ") model chunks per rank needs the interleaved schedule; ",
               name, " runs one chunk per rank (v = 1)");
  }
  if (kind == ScheduleKind::one_f_one_b || kind == ScheduleKind::zbh1) {
    MT_REQUIRE(microbatches >= pp, ConfigError, "the ", name, " schedule needs microbatches (", microbatches,
               ") >= pp (", pp, "): with fewer it never reaches its steady state (gpipe runs any number)");
  }
}

void check_split_schedule(ScheduleKind kind, const SplitRun& run) {
  if (!split_backward(kind)) return;
  const char* name = schedule_kind_name(kind);
  MT_REQUIRE(run.tp == 1, ConfigError, "parallel.schedule = ", name, " with parallel.tp (", run.tp,
             "): the split of the backward into B and W runs without tensor parallelism for now");
  MT_REQUIRE(run.cp == 1, ConfigError, "parallel.schedule = ", name, " with parallel.cp (", run.cp,
             "): the split of the backward into B and W runs without context parallelism for now");
  MT_REQUIRE(!run.experts, ConfigError, "parallel.schedule = ", name,
             " with model.n_experts > 0: the mixture of experts' backward is not split into B and W yet");
  MT_REQUIRE(!run.recompute, ConfigError, "parallel.schedule = ", name,
             " with train.recompute: a recomputed layer's activations are shared by the layers, and W needs "
             "its own until it runs");
}

namespace {

// One unit of compute in a rank's order: microbatch and virtual stage.
struct Unit {
  int microbatch, vstage;
};

class Builder {
 public:
  explicit Builder(const Schedule& s) : s_(s) {}

  // recv_act (unless the first stage), forward, send_act (unless the last).
  void forward(std::vector<Action>& out, Unit u) const {
    const int k = u.vstage, m = u.microbatch, last = s_.n_stages() - 1;
    if (k > 0) out.push_back({Op::recv_act, m, k, s_.rank_of(k - 1), tag(m, k - 1, false)});
    out.push_back({Op::forward, m, k, -1, -1});
    if (k < last) out.push_back({Op::send_act, m, k, s_.rank_of(k + 1), tag(m, k, false)});
  }

  // recv_grad (unless the last stage), backward, send_grad (unless the first).
  void backward(std::vector<Action>& out, Unit u) const {
    const int k = u.vstage, m = u.microbatch, last = s_.n_stages() - 1;
    if (k < last) out.push_back({Op::recv_grad, m, k, s_.rank_of(k + 1), tag(m, k + 1, true)});
    out.push_back({Op::backward, m, k, -1, -1});
    if (k > 0) out.push_back({Op::send_grad, m, k, s_.rank_of(k - 1), tag(m, k, true)});
  }

  // `warmup` forwards, then one forward and one backward while forwards last,
  // then the remaining backwards. warmup = all gives GPipe's order.
  std::vector<Action> one_f_one_b(const std::vector<Unit>& fwd, const std::vector<Unit>& bwd,
                                  size_t warmup) const {
    std::vector<Action> out;
    const size_t n = fwd.size();
    for (size_t i = 0; i < warmup; ++i)
      forward(out, fwd[i]);
    for (size_t i = 0; i + warmup < n; ++i) {
      forward(out, fwd[i + warmup]);
      backward(out, bwd[i]);
    }
    for (size_t i = n - warmup; i < n; ++i)
      backward(out, bwd[i]);
    return out;
  }

  // zbh1 on rank `s` over microbatches 0 … m−1 of stage s: 1F1B's F and B
  // order, W(i − s) right after B(i) in the steady phase (so at most
  // warmup + 1 + s = pp sets in flight), one deferred W after each cool-down B,
  // then the W's left.
  std::vector<Action> zbh1(int s, int m) const {
    std::vector<Action> out;
    const int warmup = std::min(s_.pp - s - 1, m);
    int next_w = 0;
    for (int i = 0; i < warmup; ++i)
      forward(out, {i, s});
    for (int i = 0; i + warmup < m; ++i) {
      forward(out, {i + warmup, s});
      backward(out, {i, s});
      if (i >= s) weight(out, {next_w++, s});
    }
    for (int i = m - warmup; i < m; ++i) {
      backward(out, {i, s});
      weight(out, {next_w++, s});
    }
    while (next_w < m)
      weight(out, {next_w++, s});
    return out;
  }

  static void weight(std::vector<Action>& out, Unit u) {
    out.push_back({Op::weight, u.microbatch, u.vstage, -1, -1});
  }

 private:
  int tag(int m, int k, bool grad) const { return message_tag(m, k, grad, s_.n_stages()); }
  const Schedule& s_;
};

// Megatron's get_model_chunk_id / microbatch order: virtual microbatch i of
// rank s is microbatch (i / (pp·v))·pp + i % pp on chunk (i % (pp·v)) / pp,
// the chunk counted from the back for backwards.
std::vector<Unit> interleaved_order(int pp, int v, int m, int s, bool forward) {
  std::vector<Unit> out;
  for (int i = 0; i < m * v; ++i) {
    const int group = i / (pp * v), in_group = i % (pp * v);
    int chunk = in_group / pp;
    if (!forward) chunk = v - 1 - chunk;
    out.push_back({group * pp + in_group % pp, chunk * pp + s});
  }
  return out;
}

}  // namespace

Schedule make_schedule(ScheduleKind kind, int pp, int v, int microbatches) {
  validate_schedule(kind, pp, v, microbatches, -1);
  Schedule s{kind, pp, v, microbatches, {}};
  const Builder b(s);
  const int m = microbatches;
  for (int r = 0; r < pp; ++r) {
    if (kind == ScheduleKind::zbh1) {
      s.ranks.push_back(b.zbh1(r, m));
      continue;
    }
    std::vector<Unit> fwd, bwd;
    size_t warmup = 0;
    if (kind == ScheduleKind::interleaved) {
      fwd = interleaved_order(pp, v, m, r, true);
      bwd = interleaved_order(pp, v, m, r, false);
      warmup = static_cast<size_t>(std::min((pp - r - 1) * 2 + (v - 1) * pp, m * v));
    } else {
      for (int i = 0; i < m; ++i)
        fwd.push_back({i, r});
      bwd = fwd;
      if (kind == ScheduleKind::gpipe) {
        std::reverse(bwd.begin(), bwd.end());
        warmup = static_cast<size_t>(m);
      } else {
        warmup = static_cast<size_t>(std::min(pp - r - 1, m));
      }
    }
    s.ranks.push_back(b.one_f_one_b(fwd, bwd, warmup));
  }
  return s;
}

}  // namespace mt::pp
