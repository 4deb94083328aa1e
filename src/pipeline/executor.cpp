#include "pipeline/executor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/device.h"
#include "core/error.h"
#include "core/timer.h"
#include "core/trace_spans.h"

namespace mt::pp {

Schedule one_stage_schedule(int microbatches) {
  return make_schedule(ScheduleKind::one_f_one_b, 1, 1, microbatches);
}

namespace {
// --trace: the action as a span on the steady clock (compute for forwards and
// backwards, pipeline for transfers), after an idle span for any gap since the
// previous action's end. Returns the action's end.
double trace_action(const Span& s, bool compute, double prev_end, double start) {
  const double end = trace_now();
  const std::string args = "\"virtual_stage\":" + std::to_string(s.vstage);
  if (start > prev_end) SpanRecorder::add({"idle", "idle", prev_end, start, true, args});
  SpanRecorder::add({s.name, compute ? "compute" : "pipeline", start, end, true, args});
  SpanRecorder::sample_memory(end);
  return end;
}

const char* span_name(Op op) {
  switch (op) {
    case Op::recv_act:
      return "recv act";
    case Op::forward:
      return "F";
    case Op::send_act:
      return "send act";
    case Op::recv_grad:
      return "recv grad";
    case Op::backward:
      return "B";
    case Op::send_grad:
      return "send grad";
    case Op::weight:
      return "W";
  }
  return "?";
}
}  // namespace

Executor::Executor(Schedule schedule, int pp_rank, Group* pp, std::vector<Stage*> chunks, int64_t mb,
                   int64_t T)
    : schedule_(std::move(schedule)), pp_rank_(pp_rank), pp_(pp), chunks_(std::move(chunks)), mb_(mb), T_(T) {
  MT_CHECK(static_cast<int>(chunks_.size()) == schedule_.v, "a rank needs one model chunk per virtual stage");
  transfers_ = transfer_plan(schedule_.ranks[static_cast<size_t>(pp_rank_)]);
  const size_t V = chunks_.size();
  slot_of_.assign(V, std::vector<int>(static_cast<size_t>(schedule_.microbatches), -1));
  free_slots_.assign(V, {});
  slots_made_.assign(V, 1);  // a model allocates slot 0 up front
  for (size_t c = 0; c < V; ++c)
    free_slots_[c].push_back(0);
}

Executor::TransferPlan Executor::transfer_plan(const std::vector<Action>& actions) {
  int64_t recvs = 0, grad_sends = 0;
  for (const Action& a : actions) {
    recvs += a.op == Op::recv_act || a.op == Op::recv_grad;
    grad_sends += a.op == Op::send_grad;
  }
  return {std::min(static_cast<int64_t>(kRecvAhead), recvs), std::min<int64_t>(1, grad_sends), grad_sends};
}

Executor::SendBuffer& Executor::send_buffer(int64_t n) {
  for (SendBuffer& b : send_buffers_) {
    if (b.data.numel() >= n && b.work.test()) return b;
  }
  MT_CHECK(static_cast<int64_t>(send_buffers_.size()) < transfers_.most_sends, "pipeline send buffer ",
           send_buffers_.size() + 1, " beyond the transfer plan's ", transfers_.most_sends);
  send_buffers_.push_back({Tensor({n}, MemKind::comm), Work()});
  return send_buffers_.back();
}

void Executor::post_receives(const std::vector<Action>& actions) {
  while (static_cast<int64_t>(posted_.size()) < transfers_.recvs) {
    while (next_recv_ < actions.size() && actions[next_recv_].op != Op::recv_act &&
           actions[next_recv_].op != Op::recv_grad)
      ++next_recv_;
    if (next_recv_ >= actions.size()) return;
    const Action& a = actions[next_recv_];
    const int64_t n = chunks_[static_cast<size_t>(schedule_.chunk_of(a.vstage))]->residual_numel(mb_, T_);
    PostedRecv r;
    r.action = next_recv_++;
    if (!recv_pool_.empty() && recv_pool_.back().numel() >= n) {
      r.buf = std::move(recv_pool_.back());
      recv_pool_.pop_back();
    } else {
      r.buf = Tensor({n}, MemKind::comm);
    }
    r.work = pp().recv_async(r.buf.data(), n, ElemType::f32, a.peer, a.tag,
                             a.op == Op::recv_act ? "pp activation" : "pp gradient");
    posted_.push_back(std::move(r));
  }
}

void Executor::take_receive(size_t action, float* dst, int64_t n) {
  MT_CHECK(!posted_.empty() && posted_.front().action == action, "pipeline receive ", action,
           " was not posted ahead");
  PostedRecv& r = posted_.front();
  r.work.wait();
  copy_bytes(dst, r.buf.data(), n * int64_t{sizeof(float)});
  recv_pool_.push_back(std::move(r.buf));
  posted_.pop_front();
}

double Executor::run_actions(const int32_t* inputs, const int32_t* targets, float dloss) {
  spans_.clear();
  busy_s_ = 0;
  Timer clock;
  const int64_t tokens = mb_ * T_;
  double loss = 0.0;
  std::vector<int64_t> backwards(chunks_.size(), 0);  // per chunk: tells its store which backward is the last
  const std::vector<Action>& actions = schedule_.ranks[static_cast<size_t>(pp_rank_)];
  next_recv_ = 0;
  post_receives(actions);
  const bool tracing = SpanRecorder::active();
  double traced_end = tracing ? trace_now() : 0.0;  // the previous action's end, for the idle gaps
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const int c = schedule_.chunk_of(a.vstage), m = a.microbatch;
    Stage& model = *chunks_[static_cast<size_t>(c)];
    const int64_t n = model.residual_numel(mb_, T_);
    const double t_start = clock.seconds();
    const double traced_start = tracing ? trace_now() : 0.0;
    switch (a.op) {
      case Op::recv_act: {
        take_receive(i, model.stage_input(take_slot(c, m)), n);
        post_receives(actions);
        break;
      }
      case Op::forward:
        model.set_forward_rows(first_row_ + m * mb_);
        {
          const double l =
              model.forward_slot(take_slot(c, m), inputs + m * tokens, targets + m * tokens, mb_, T_);
          loss += l;
          loss_exact_.add(l);
          break;
        }
      case Op::send_act: {
        const float* out = model.stage_output(slot_of_[static_cast<size_t>(c)][static_cast<size_t>(m)]);
        act_sends_.push_back(pp().send_async(out, n, ElemType::f32, a.peer, a.tag, "pp activation"));
        break;
      }
      case Op::recv_grad:
        take_receive(i, model.output_grad(), n);
        post_receives(actions);
        break;
      case Op::backward:
      case Op::weight:
        run_backward(a, backwards[static_cast<size_t>(c)], dloss);
        break;
      case Op::send_grad: {
        SendBuffer& b = send_buffer(n);
        copy_bytes(b.data.data(), model.input_grad(), n * int64_t{sizeof(float)});
        b.work = pp().send_async(b.data.data(), n, ElemType::f32, a.peer, a.tag, "pp gradient");
        break;
      }
    }
    const double t_end = clock.seconds();
    const bool compute = a.op == Op::forward || a.op == Op::backward || a.op == Op::weight;
    if (compute) busy_s_ += t_end - t_start;
    spans_.push_back(
        {std::string(span_name(a.op)) + (compute ? std::to_string(m) : ""), a.vstage, t_start, t_end});
    if (tracing) traced_end = trace_action(spans_.back(), compute, traced_end, traced_start);
  }
  {
    const TraceScope drain("pipeline", "drain sends");
    for (Work& w : act_sends_)
      w.wait();
    act_sends_.clear();
    for (SendBuffer& b : send_buffers_)
      b.work.wait();
  }
  wall_s_ = clock.seconds();
  return loss;
}

void Executor::run_backward(const Action& a, int64_t& backwards, float dloss) {
  const int c = schedule_.chunk_of(a.vstage), m = a.microbatch;
  Stage& model = *chunks_[static_cast<size_t>(c)];
  int& s = slot_of_[static_cast<size_t>(c)][static_cast<size_t>(m)];
  if (a.op == Op::backward && schedule_.splits_backward()) {  // B: the slot stays until the W
    model.backward_input_slot(s, dloss);
    return;
  }
  // The store's microbatch protocol runs around the fused backward, or the W, where gradients accumulate.
  model.begin_microbatch(backwards++, m);
  if (a.op == Op::weight)
    model.backward_weight_slot(s);
  else
    model.backward_slot(s, dloss);
  free_slots_[static_cast<size_t>(c)].push_back(s);
  s = -1;
}

int Executor::take_slot(int c, int m) {
  int& s = slot_of_[static_cast<size_t>(c)][static_cast<size_t>(m)];
  if (s >= 0) return s;
  std::vector<int>& free = free_slots_[static_cast<size_t>(c)];
  if (free.empty()) free.push_back(slots_made_[static_cast<size_t>(c)]++);
  s = free.back();
  free.pop_back();
  return s;
}

Group& Executor::pp() const {
  MT_CHECK(pp_ != nullptr, "a schedule with transfers needs the pipeline group");
  return *pp_;
}

double Executor::run(const int32_t* inputs, const int32_t* targets, int64_t valid_tokens) {
  {
    const TraceScope span("phase", "begin step");
    for (Stage* c : chunks_)
      c->begin_step(schedule_.microbatches);
  }
  double loss = 0.0;
  loss_exact_.clear();
  if (valid_tokens > 0)
    loss = run_actions(inputs, targets, static_cast<float>(1.0 / static_cast<double>(valid_tokens)));
  const TraceScope span("phase", "finish grads");  // the last gradient reductions
  for (Stage* c : chunks_)
    c->finish_grads();
  return loss;
}

double Executor::forward_loss(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) {
  const int P = schedule_.pp, K = schedule_.n_stages();
  double loss = 0.0;
  for (int k = pp_rank_; k < K; k += P) {  // this rank's virtual stages, in order
    Stage& m = *chunks_[static_cast<size_t>(k / P)];
    const int64_t n = m.residual_numel(B, T);
    if (k > 0)
      pp().recv(m.stage_input(0), n, ElemType::f32, (k - 1) % P, message_tag(0, k - 1, false, K), "pp eval");
    loss += m.forward_slot(0, inputs, targets, B, T);
    if (k < K - 1)
      pp().send(m.stage_output(0), n, ElemType::f32, (k + 1) % P, message_tag(0, k, false, K), "pp eval");
  }
  if (pp_ != nullptr) pp_->all_reduce(&loss, 1, "pp eval loss");
  return loss;
}

}  // namespace mt::pp
