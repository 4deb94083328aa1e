#include "train/pipeline.h"

#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"
#include "pipeline/stages.h"
#include "train/explain.h"

namespace mt {

std::vector<StageRange> split_stages(int64_t n_layers, int pp, int v, const std::string& explicit_layers) {
  const std::vector<int64_t> counts = pp::stage_layer_counts(n_layers, pp, v, explicit_layers);
  const int64_t K = static_cast<int64_t>(counts.size());
  std::vector<StageRange> stages;
  int64_t at = 0;
  for (int64_t k = 0; k < K; ++k) {
    StageRange s;
    s.first_layer = at;
    s.end_layer = at + counts[static_cast<size_t>(k)];
    s.embed = k == 0;
    s.head = k == K - 1;
    at = s.end_layer;
    stages.push_back(s);
  }
  return stages;
}

std::string stage_map(const std::vector<StageRange>& stages, int pp) {
  std::string out;
  for (size_t k = 0; k < stages.size(); ++k) {
    const StageRange& s = stages[k];
    char buf[256];
    std::snprintf(buf, sizeof buf, "  stage %zu (pp rank %zu, chunk %zu): %s%lld layers %lld-%lld%s\n", k,
                  k % static_cast<size_t>(pp), k / static_cast<size_t>(pp), s.embed ? "embedding + " : "",
                  static_cast<long long>(s.end_layer - s.first_layer), static_cast<long long>(s.first_layer),
                  static_cast<long long>(s.end_layer - 1), s.head ? " + final norm, LM head, loss" : "");
    out += buf;
  }
  return out;
}

namespace {
const char* span_name(pp::Op op) {
  switch (op) {
    case pp::Op::recv_act:
      return "recv act";
    case pp::Op::forward:
      return "F";
    case pp::Op::send_act:
      return "send act";
    case pp::Op::recv_grad:
      return "recv grad";
    case pp::Op::backward:
      return "B";
    case pp::Op::send_grad:
      return "send grad";
  }
  return "?";
}
}  // namespace

PipelineExecutor::PipelineExecutor(const pp::Schedule& schedule, int pp_rank, Group& pp,
                                   std::vector<Llama*> chunks, int64_t mb, int64_t T)
    : schedule_(schedule), pp_rank_(pp_rank), pp_(pp), chunks_(std::move(chunks)), mb_(mb), T_(T) {
  MT_CHECK(static_cast<int>(chunks_.size()) == schedule_.v, "a rank needs one model chunk per virtual stage");
  const size_t V = chunks_.size();
  slot_of_.assign(V, std::vector<int>(static_cast<size_t>(schedule_.microbatches), -1));
  free_slots_.assign(V, {});
  slots_made_.assign(V, 1);  // a model allocates slot 0 up front
  for (size_t c = 0; c < V; ++c)
    free_slots_[c].push_back(0);
}

PipelineExecutor::SendBuffer& PipelineExecutor::send_buffer(int64_t n) {
  for (SendBuffer& b : send_buffers_) {
    if (b.data.numel() >= n && b.work.test()) return b;
  }
  send_buffers_.push_back({Tensor({n}, MemKind::comm), Work()});
  return send_buffers_.back();
}

void PipelineExecutor::post_receives(const std::vector<pp::Action>& actions) {
  while (posted_.size() < kRecvAhead) {
    while (next_recv_ < actions.size() && actions[next_recv_].op != pp::Op::recv_act &&
           actions[next_recv_].op != pp::Op::recv_grad)
      ++next_recv_;
    if (next_recv_ >= actions.size()) return;
    const pp::Action& a = actions[next_recv_];
    const int64_t n = chunks_[static_cast<size_t>(chunk_of(a.vstage))]->residual_numel(mb_, T_);
    PostedRecv r;
    r.action = next_recv_++;
    if (!recv_pool_.empty() && recv_pool_.back().numel() >= n) {
      r.buf = std::move(recv_pool_.back());
      recv_pool_.pop_back();
    } else {
      r.buf = Tensor({n}, MemKind::comm);
    }
    r.work = pp_.recv_async(r.buf.data(), n, ElemType::f32, a.peer, a.tag,
                            a.op == pp::Op::recv_act ? "pp activation" : "pp gradient");
    posted_.push_back(std::move(r));
  }
}

void PipelineExecutor::take_receive(size_t action, float* dst, int64_t n) {
  MT_CHECK(!posted_.empty() && posted_.front().action == action, "pipeline receive ", action,
           " was not posted ahead");
  PostedRecv& r = posted_.front();
  r.work.wait();
  std::memcpy(dst, r.buf.data(), static_cast<size_t>(n) * sizeof(float));
  recv_pool_.push_back(std::move(r.buf));
  posted_.pop_front();
}

double PipelineExecutor::run(const int32_t* inputs, const int32_t* targets, float dloss) {
  spans_.clear();
  busy_s_ = 0;
  Timer clock;
  const int64_t tokens = mb_ * T_;
  double loss = 0.0;
  std::vector<int64_t> backwards(chunks_.size(), 0);  // per chunk: tells its store which backward is the last
  auto take_slot = [&](int c, int m) {
    int& s = slot_of_[static_cast<size_t>(c)][static_cast<size_t>(m)];
    if (s >= 0) return s;
    std::vector<int>& free = free_slots_[static_cast<size_t>(c)];
    if (free.empty()) {
      free.push_back(slots_made_[static_cast<size_t>(c)]++);
    }
    s = free.back();
    free.pop_back();
    return s;
  };
  const std::vector<pp::Action>& actions = schedule_.ranks[static_cast<size_t>(pp_rank_)];
  next_recv_ = 0;
  post_receives(actions);
  for (size_t i = 0; i < actions.size(); ++i) {
    const pp::Action& a = actions[i];
    const int c = chunk_of(a.vstage), m = a.microbatch;
    Llama& model = *chunks_[static_cast<size_t>(c)];
    const int64_t n = model.residual_numel(mb_, T_);
    const double t_start = clock.seconds();
    switch (a.op) {
      case pp::Op::recv_act: {
        take_receive(i, model.stage_input(take_slot(c, m)), n);
        post_receives(actions);
        break;
      }
      case pp::Op::forward:
        loss += model.forward_slot(take_slot(c, m), inputs + m * tokens, targets + m * tokens, mb_, T_);
        break;
      case pp::Op::send_act: {
        const float* out = model.stage_output(slot_of_[static_cast<size_t>(c)][static_cast<size_t>(m)]);
        act_sends_.push_back(pp_.send_async(out, n, ElemType::f32, a.peer, a.tag, "pp activation"));
        break;
      }
      case pp::Op::recv_grad:
        take_receive(i, model.output_grad(), n);
        post_receives(actions);
        break;
      case pp::Op::backward: {
        int& s = slot_of_[static_cast<size_t>(c)][static_cast<size_t>(m)];
        model.store().begin_microbatch(backwards[static_cast<size_t>(c)]++);
        model.backward_slot(s, dloss);
        free_slots_[static_cast<size_t>(c)].push_back(s);
        s = -1;
        break;
      }
      case pp::Op::send_grad: {
        SendBuffer& b = send_buffer(n);
        std::memcpy(b.data.data(), model.input_grad(), static_cast<size_t>(n) * sizeof(float));
        b.work = pp_.send_async(b.data.data(), n, ElemType::f32, a.peer, a.tag, "pp gradient");
        break;
      }
    }
    const double t_end = clock.seconds();
    const bool compute = a.op == pp::Op::forward || a.op == pp::Op::backward;
    if (compute) busy_s_ += t_end - t_start;
    spans_.push_back(
        {std::string(span_name(a.op)) + (compute ? std::to_string(m) : ""), a.vstage, t_start, t_end});
  }
  for (Work& w : act_sends_)
    w.wait();
  act_sends_.clear();
  for (SendBuffer& b : send_buffers_)
    b.work.wait();
  wall_s_ = clock.seconds();
  return loss;
}

double pipeline_forward_loss(const std::vector<Llama*>& chunks, int pp_rank, Group& pp, const int32_t* inputs,
                             const int32_t* targets, int64_t B, int64_t T) {
  const int P = pp.size(), K = P * static_cast<int>(chunks.size());
  double loss = 0.0;
  for (int k = pp_rank; k < K; k += P) {  // this rank's virtual stages, in order
    Llama& m = *chunks[static_cast<size_t>(k / P)];
    const int64_t n = m.residual_numel(B, T);
    if (k > 0)
      pp.recv(m.stage_input(0), n, ElemType::f32, (k - 1) % P, pp::message_tag(0, k - 1, false, K),
              "pp eval");
    loss += m.forward_slot(0, inputs, targets, B, T);
    if (k < K - 1)
      pp.send(m.stage_output(0), n, ElemType::f32, (k + 1) % P, pp::message_tag(0, k, false, K), "pp eval");
  }
  pp.all_reduce(&loss, 1, "pp eval loss");
  return loss;
}

std::string pipeline_trace_json(Group& world, int rank, const std::vector<PipeSpan>& spans) {
  std::string mine;
  auto event = [&](const std::string& name, int vstage, double start, double end) {
    char buf[256];
    std::snprintf(
        buf, sizeof buf,
        "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.1f,\"dur\":%.1f,"
        "\"args\":{\"virtual_stage\":%d}},\n",
        name.c_str(), name.empty() ? "" : (name[0] == 'F' || name[0] == 'B' ? "compute" : "transfer"), rank,
        start * 1e6, (end - start) * 1e6, vstage);
    mine += buf;
  };
  double last = 0;
  for (const PipeSpan& s : spans) {
    if (s.start_s > last) event("idle", s.vstage, last, s.start_s);
    event(s.name, s.vstage, s.start_s, s.end_s);
    last = s.end_s;
  }
  char meta[128];
  std::snprintf(meta, sizeof meta,
                "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n",
                rank, rank);
  mine += meta;
  std::string all = gather_to_rank0(world, mine, "trace");
  if (world.rank() != 0) return "";
  if (all.size() >= 2) all.resize(all.size() - 2);  // the last ",\n"
  return "{\"traceEvents\":[\n" + all + "\n]}\n";
}

}  // namespace mt
