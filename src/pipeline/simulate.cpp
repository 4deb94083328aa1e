#include "pipeline/simulate.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "core/error.h"  // detail::concat

namespace mt::pp {

double ideal_bubble(int pp, int v, int microbatches) {
  return static_cast<double>(pp - 1) / static_cast<double>(v * microbatches + pp - 1);
}

double schedule_bubble(ScheduleKind kind, int pp, int v, int microbatches) {
  if (kind == ScheduleKind::zbh1)
    return static_cast<double>(pp - 1) / static_cast<double>(3 * microbatches + pp - 1);
  return ideal_bubble(pp, v, microbatches);
}

SimCosts default_costs(const Schedule& s) {
  return s.splits_backward() ? SimCosts{1, 1, 1} : SimCosts{1, 2, 1};
}

namespace {

struct Broken {  // thrown inside the simulator, becomes SimResult::error
  std::string what;
};

template <typename... Args>
[[noreturn]] void broken(Args&&... args) {
  throw Broken{detail::concat(std::forward<Args>(args)...)};
}

std::string describe(int rank, size_t index, const Action& a) {
  std::ostringstream os;
  os << "rank " << rank << " action " << index << " (" << op_name(a.op) << " m=" << a.microbatch
     << " k=" << a.vstage;
  if (a.peer >= 0) os << " peer=" << a.peer << " tag=" << a.tag;
  os << ")";
  return os.str();
}

bool is_grad(Op op) {
  return op == Op::recv_grad || op == Op::send_grad;
}

class Simulator {
 public:
  Simulator(const Schedule& s, SimCosts costs) : s_(s), costs_(costs), S_(s.n_stages()), M_(s.microbatches) {
    if (static_cast<int>(s.ranks.size()) != s.pp)
      broken("the schedule has ", s.ranks.size(), " ranks, pp = ", s.pp);
    const size_t cells = static_cast<size_t>(S_) * static_cast<size_t>(M_);
    f_end_.assign(cells, -1);
    b_end_.assign(cells, -1);
    f_start_.assign(cells, -1);
    b_start_.assign(cells, -1);
    w_start_.assign(cells, -1);
    w_end_.assign(cells, -1);
    act_in_.assign(cells, false);
    grad_in_.assign(cells, false);
    act_sent_.assign(cells, false);
    grad_sent_.assign(cells, false);
    pc_.assign(s.pp, 0);
    clock_.assign(s.pp, 0);
    in_flight_.assign(s.pp, 0);
    deferred_.assign(s.pp, 0);
    r_.peak_in_flight.assign(s.pp, 0);
    r_.peak_deferred.assign(s.pp, 0);
    r_.busy.assign(s.pp, 0);
    for (const auto& list : s.ranks)
      r_.time.emplace_back(list.size(), -1);
  }

  SimResult run() {
    for (;;) {
      bool moved = false, done = true;
      for (int r = 0; r < s_.pp; ++r) {
        const auto& list = s_.ranks[static_cast<size_t>(r)];
        while (pc_[r] < list.size() && step(r, pc_[r], list[pc_[r]]))
          ++pc_[r], moved = true;
        done = done && pc_[r] == list.size();
      }
      if (done) break;
      if (!moved) deadlock();
    }
    check_complete();
    check_fifo();
    check_timeline();
    r_.costs = costs_;
    for (int r = 0; r < s_.pp; ++r)
      r_.makespan = std::max(r_.makespan, clock_[r]);
    for (int r = 0; r < s_.pp; ++r)
      r_.bubble.push_back(static_cast<double>(r_.makespan - r_.busy[r]) / static_cast<double>(r_.makespan));
    r_.ok = true;
    return r_;
  }

 private:
  size_t cell(int m, int k) const {
    return static_cast<size_t>(m) * static_cast<size_t>(S_) + static_cast<size_t>(k);
  }
  int expected_tag(int m, int k_sender, bool grad) const { return message_tag(m, k_sender, grad, S_); }

  // Executes one action; false when it is a receive whose message is not there yet.
  bool step(int r, size_t i, const Action& a) {
    const std::string where = describe(r, i, a);
    const int m = a.microbatch, k = a.vstage, last = S_ - 1;
    if (m < 0 || m >= M_ || k < 0 || k > last) broken(where, ": microbatch or stage out of range");
    if (s_.rank_of(k) != r) broken(where, ": stage ", k, " lives on rank ", s_.rank_of(k));
    const size_t c = cell(m, k);
    int& t = clock_[r];
    switch (a.op) {
      case Op::forward:
        if (f_end_[c] >= 0) broken(where, ": a second forward of this microbatch and stage");
        if (k > 0 && !act_in_[c]) broken(where, ": no recv_act of its input before it");
        check_no_peer(where, a);
        f_start_[c] = t;
        r_.time[r][i] = t;
        t += costs_.forward;
        f_end_[c] = t;
        r_.busy[r] += costs_.forward;
        r_.peak_in_flight[r] = std::max(r_.peak_in_flight[r], ++in_flight_[r]);
        return true;
      case Op::backward:
        if (b_end_[c] >= 0) broken(where, ": a second backward of this microbatch and stage");
        if (f_end_[c] < 0) broken(where, ": before the forward of this microbatch and stage");
        if (k < last && !grad_in_[c]) broken(where, ": no recv_grad of its output gradient before it");
        check_no_peer(where, a);
        b_start_[c] = t;
        r_.time[r][i] = t;
        t += costs_.backward;
        b_end_[c] = t;
        r_.busy[r] += costs_.backward;
        if (s_.splits_backward())
          r_.peak_deferred[r] = std::max(r_.peak_deferred[r], ++deferred_[r]);
        else
          --in_flight_[r];
        return true;
      case Op::weight:
        weight(r, i, a, where);
        return true;
      case Op::send_act:
      case Op::send_grad: {
        const bool grad = a.op == Op::send_grad;
        if (grad ? k == 0 : k == last)
          broken(where, ": the ", grad ? "first" : "last", " stage sends no ",
                 grad ? "gradient" : "activation");
        if (grad ? b_end_[c] < 0 : f_end_[c] < 0)
          broken(where, ": before the ", grad ? "backward" : "forward", " that computes it");
        const int to = s_.rank_of(grad ? k - 1 : k + 1);
        check_message(where, a, to, expected_tag(m, k, grad));
        auto& sent = grad ? grad_sent_ : act_sent_;
        if (sent[c]) broken(where, ": sent twice");
        sent[c] = true;
        mailbox_[{r, a.peer, a.tag}] = t;
        r_.time[r][i] = t;
        return true;
      }
      case Op::recv_act:
      case Op::recv_grad: {
        const bool grad = a.op == Op::recv_grad;
        if (grad ? k == last : k == 0)
          broken(where, ": the ", grad ? "last" : "first", " stage receives no ",
                 grad ? "gradient" : "activation");
        const int k_from = grad ? k + 1 : k - 1;
        check_message(where, a, s_.rank_of(k_from), expected_tag(m, k_from, grad));
        auto& got = grad ? grad_in_ : act_in_;
        if (got[c]) broken(where, ": received twice");
        const auto it = mailbox_.find({a.peer, r, a.tag});
        if (it == mailbox_.end()) return false;
        t = std::max(t, it->second);
        mailbox_.erase(it);
        got[c] = true;
        r_.time[r][i] = t;
        return true;
      }
    }
    broken(where, ": unknown op");
  }

  // W(m, k): once, after its B, in a split schedule only; frees the activation set.
  void weight(int r, size_t i, const Action& a, const std::string& where) {
    const size_t c = cell(a.microbatch, a.vstage);
    int& t = clock_[r];
    if (!s_.splits_backward()) broken(where, ": a W in a schedule that does not split the backward");
    if (w_end_[c] >= 0) broken(where, ": a second W of this microbatch and stage");
    if (b_end_[c] < 0) broken(where, ": before the B of this microbatch and stage");
    check_no_peer(where, a);
    w_start_[c] = t;
    r_.time[r][i] = t;
    t += costs_.weight;
    w_end_[c] = t;
    r_.busy[r] += costs_.weight;
    --in_flight_[r];
    --deferred_[r];
  }

  static void check_no_peer(const std::string& where, const Action& a) {
    if (a.peer != -1 || a.tag != -1) broken(where, ": compute actions have peer and tag -1");
  }

  static void check_message(const std::string& where, const Action& a, int peer, int tag) {
    if (a.peer != peer) broken(where, ": the peer must be rank ", peer);
    if (a.tag != tag) broken(where, ": the tag must be ", tag);
  }

  [[noreturn]] void deadlock() const {
    std::ostringstream os;
    os << "deadlock: no rank can move;";
    for (int r = 0; r < s_.pp; ++r) {
      const auto& list = s_.ranks[static_cast<size_t>(r)];
      if (pc_[r] < list.size()) os << " " << describe(r, pc_[r], list[pc_[r]]) << " waits;";
    }
    broken(os.str());
  }

  void check_complete() const {
    for (int m = 0; m < M_; ++m) {
      for (int k = 0; k < S_; ++k) {
        const size_t c = cell(m, k);
        if (f_end_[c] < 0)
          broken("no forward of microbatch ", m, " on stage ", k, " (rank ", s_.rank_of(k), ")");
        if (b_end_[c] < 0)
          broken("no backward of microbatch ", m, " on stage ", k, " (rank ", s_.rank_of(k), ")");
        if (s_.splits_backward() && w_end_[c] < 0)
          broken("no W of microbatch ", m, " on stage ", k, " (rank ", s_.rank_of(k), ")");
      }
    }
    if (!mailbox_.empty()) {
      const auto& [key, t] = *mailbox_.begin();
      const auto& [src, dst, tag] = key;
      broken("rank ", src, " sends tag ", tag, " to rank ", dst, " (", mailbox_.size(),
             " message(s) in all) that is never received");
    }
  }

  // For each (src, dst, act|grad): the tags in the order src posts them equal
  // the tags in the order dst receives them.
  void check_fifo() const {
    std::map<std::tuple<int, int, bool>, std::vector<int>> sends, recvs;
    for (int r = 0; r < s_.pp; ++r) {
      for (const Action& a : s_.ranks[static_cast<size_t>(r)]) {
        if (a.op == Op::send_act || a.op == Op::send_grad) sends[{r, a.peer, is_grad(a.op)}].push_back(a.tag);
        if (a.op == Op::recv_act || a.op == Op::recv_grad) recvs[{a.peer, r, is_grad(a.op)}].push_back(a.tag);
      }
    }
    for (const auto& [key, tags] : sends) {
      const auto& got = recvs.at(key);  // the run matched every send, so both sides exist
      for (size_t n = 0; n < tags.size(); ++n) {
        if (tags[n] == got[n]) continue;
        const auto& [src, dst, grad] = key;
        broken("rank ", src, " posts its ", grad ? "gradient" : "activation", " sends to rank ", dst,
               " in another order than rank ", dst, " receives them: send #", n, " is tag ", tags[n],
               " (m=", tags[n] / 2 / S_, " k=", tags[n] / 2 % S_, "), receive #", n, " expects tag ", got[n],
               " (m=", got[n] / 2 / S_, " k=", got[n] / 2 % S_, ")");
      }
    }
  }

  // The same dependencies, on the clock: F(m,k) starts after F(m,k−1) ends,
  // B(m,k) after F(m,k) and B(m,k+1) end, W(m,k) after B(m,k).
  void check_timeline() const {
    for (int m = 0; m < M_; ++m) {
      for (int k = 0; k < S_; ++k) {
        const size_t c = cell(m, k);
        const bool ok = (k == 0 || f_start_[c] >= f_end_[cell(m, k - 1)]) && b_start_[c] >= f_end_[c] &&
                        (k == S_ - 1 || b_start_[c] >= b_end_[cell(m, k + 1)]) &&
                        (!s_.splits_backward() || w_start_[c] >= b_end_[c]);
        if (!ok) broken("timeline: microbatch ", m, " stage ", k, " starts before its inputs are ready");
      }
    }
  }

  const Schedule& s_;
  SimCosts costs_;
  int S_, M_;
  std::vector<int> f_start_, f_end_, b_start_, b_end_, w_start_, w_end_;  // per (m, k); −1 until run
  std::vector<bool> act_in_, grad_in_, act_sent_, grad_sent_;
  std::vector<size_t> pc_;
  std::vector<int> clock_, in_flight_, deferred_;
  std::map<std::tuple<int, int, int>, int> mailbox_;  // (src, dst, tag) -> time posted
  SimResult r_;
};

}  // namespace

SimResult simulate(const Schedule& schedule) {
  return simulate(schedule, default_costs(schedule));
}

SimResult simulate(const Schedule& schedule, SimCosts costs) {
  try {
    return Simulator(schedule, costs).run();
  } catch (const Broken& b) {
    SimResult r;
    r.error = b.what;
    return r;
  }
}

}  // namespace mt::pp
