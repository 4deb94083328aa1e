#include "train/train_step.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <optional>

#include "core/error.h"
#include "core/memory.h"
#include "core/timer.h"
#include "core/trace_spans.h"
#include "data/sampler.h"
#include "ops/gemm.h"
#include "optim/clip.h"
#include "parallel/canonical.h"
#include "parallel/context_parallel.h"
#include "parallel/cp_canonical.h"
#include "train/evaluate.h"

namespace mt {

Batch shard_batch(const RunMesh& mesh, const Batch& global, RowSplit split, int64_t canonical_cp) {
  Batch out;
  out.rows = split == RowSplit::dp ? global.rows / mesh.dp : global.rows;
  out.T = global.T / mesh.cp;
  const size_t first = static_cast<size_t>((split == RowSplit::dp ? mesh.dp_rank * out.rows : 0) * global.T);
  const size_t n = static_cast<size_t>(out.rows * out.T);
  out.inputs.resize(n);
  out.targets.resize(n);
  if (canonical_cp > 1) {
    const int C = static_cast<int>(canonical_cp);
    cp::piece_slice(out.inputs.data(), global.inputs.data() + first, out.rows, global.T, C, mesh.cp,
                    mesh.cp_rank);
    cp::piece_slice(out.targets.data(), global.targets.data() + first, out.rows, global.T, C, mesh.cp,
                    mesh.cp_rank);
  } else if (mesh.cp == 1) {
    std::memcpy(out.inputs.data(), global.inputs.data() + first, n * sizeof(int32_t));
    std::memcpy(out.targets.data(), global.targets.data() + first, n * sizeof(int32_t));
  } else {
    cp::zigzag_slice(out.inputs.data(), global.inputs.data() + first, out.rows, global.T, 1, mesh.cp,
                     mesh.cp_rank);
    cp::zigzag_slice(out.targets.data(), global.targets.data() + first, out.rows, global.T, 1, mesh.cp,
                     mesh.cp_rank);
  }
  return out;
}

namespace {

// Σ over the dp × cp group: the dp replicas and the cp shares of the sequences.
template <typename T>
void sum_over_dp_cp(const RunMesh& mesh, T* v, const char* label, int64_t n = 1) {
  if (mesh.dp_cp_group() && mesh.dp * mesh.cp > 1) mesh.dp_cp_group()->all_reduce(v, n, label);
}

void sum_over(Group* g, double* v, const char* label, int64_t n = 1) {
  if (g) g->all_reduce(v, n, label);
}

// The canonical mode's totals (parallel/canonical.h): an exact sum whose words
// (limbs and non-finite count) are summed over `groups` as integers, so the
// total is the same bits on every layout.
double exact_total(ExactSum s, std::initializer_list<Group*> groups, const char* label) {
  for (Group* g : groups)
    if (g && g->size() > 1) g->all_reduce(s.words(), ExactSum::kWords, label);
  s.normalise();
  return s.value();
}

// Σ g² over every chunk, exactly, then over tp and pp (each store sums its dp shards).
double exact_grad_sum_squares(TrainModel& model, const RunMesh& mesh) {
  ExactSum sq;
  for (auto& c : model.chunks)
    c->store().grad_sum_squares_exact(sq);
  return exact_total(sq, {mesh.tp_group(), mesh.pp_group()}, "grad norm");
}

constexpr int64_t kVotes = 3;  // the fields of StepVotes

void put_votes(const StepVotes& in, int64_t* out) {
  out[0] = in.writer_done;
  out[1] = in.sigterm;
  out[2] = in.sigusr1;
}

// With tied embeddings over pp > 1: sums the embedding's gradient between the
// first stage and the last stage's copy (both hold the same dp share after
// finish_grads, and under ZeRO 1 the same whole gradient, which the norm
// reads: ParamStore::exchanged_grad_of), so that the two copies stay equal. In the canonical mode
// (parallel/canonical_store.h) that is the embedding's tree + the head's, as
// one stage holding both adds them; two terms: by the tree, the same sum.
void sum_tied_embedding(const RunMesh& mesh, ParamStore* store, bool canonical) {
  if (!mesh.tied_group() || store == nullptr) return;
  int64_t n = 0;
  const std::string name = "model.embed_tokens.weight";
  float* g = store->exchanged_grad_of(name, &n);
  if (canonical)
    mesh.tied_group()->all_reduce(g, n, ElemType::f32, SumOrder::tree, "tied embedding grads");
  else
    mesh.tied_group()->all_reduce(g, n, "tied embedding grads");
  store->after_grad_exchange(name);
}

// LAMB's per-tensor sums over the other ranks holding pieces of the same
// tensors: the store's dp × cp group when ZeRO shards the state (with ZeRO 0
// every replica holds whole pieces), and the tp group (norm_counted leaves out
// the copies of replicated tensors). Pipeline stages hold disjoint tensors (a
// tied embedding's two copies are equal and get equal ratios).
NormReducer lamb_reducer(const RunMesh& mesh, const ParamStore& st) {
  return [&mesh, zero = st.sharding().zero](double* v, int64_t n) {
    if (zero >= 1 && mesh.dp_cp_group() && mesh.dp * mesh.cp > 1)
      mesh.dp_cp_group()->all_reduce(v, n, "lamb norms");
    if (mesh.tp_group()) mesh.tp_group()->all_reduce(v, n, "lamb norms");
  };
}

// lamb_reducer's groups for the canonical mode's exact norms (their words as int64).
WordReducer lamb_word_reducer(const RunMesh& mesh, const ParamStore& st) {
  return [&mesh, zero = st.sharding().zero](int64_t* v, int64_t n) {
    if (zero >= 1 && mesh.dp_cp_group() && mesh.dp * mesh.cp > 1)
      mesh.dp_cp_group()->all_reduce(v, n, "lamb norms");
    if (mesh.tp_group()) mesh.tp_group()->all_reduce(v, n, "lamb norms");
  };
}

// Clip and the optimizer on every chunk, or count a non-finite step (throws
// after train.max_bad_steps of them in a row).
void update(TrainModel& model, const RunMesh& mesh, const TrainConfig& tc, StepStats& s) {
  if (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm)) {
    s.skipped = true;
    ++model.bad_steps;
    if (mesh.rank == 0)
      std::fprintf(stderr,
                   "step %lld: loss %g, gradient norm %g is not finite: update skipped (%lld of at most %lld "
                   "in a row)\n",
                   static_cast<long long>(s.step), s.loss, s.grad_norm,
                   static_cast<long long>(model.bad_steps), static_cast<long long>(tc.max_bad_steps));
    MT_REQUIRE(model.bad_steps < tc.max_bad_steps, Error, "stopping at step ", s.step, ": ", model.bad_steps,
               " consecutive steps with a non-finite loss or gradient norm (train.max_bad_steps = ",
               tc.max_bad_steps, ")");
    return;
  }
  model.bad_steps = 0;
  if (model.before_update) model.before_update();
  for (size_t c = 0; c < model.chunks.size(); ++c) {
    ParamStore& st = model.chunks[c]->store();
    clip_by_norm(st.local_grads(), st.local_numel(), s.grad_norm, tc.grad_clip);
    model.optims[c]->step(st.local_params(), st.local_grads(), s.lr, lamb_reducer(mesh, st),
                          lamb_word_reducer(mesh, st));
    st.after_update();
  }
}

// The step's forwards and backwards (the executor's schedule); the loss sum.
// The weights stay put until the update, so the bf16 kernel rounds each once (ops/gemm.h).
double run_pass(TrainModel& model, const Batch& mine, int64_t valid) {
  std::vector<std::span<const float>> resident;
  for (auto& c : model.chunks)
    resident.push_back(c->store().resident_params());
  const Bf16WeightBits weight_bits(std::move(resident));
  return model.executor->run(mine.inputs.data(), mine.targets.data(), valid);
}

}  // namespace

StepStats train_step(TrainModel& model, const RunMesh& mesh, const Config& cfg, const TokenFile& train_file,
                     int64_t step, double lr, StepVotes* votes) {
  const TrainConfig& tc = cfg.train;
  Timer timer;
  const double cpu_start_s = process_cpu_seconds();
  const double start_s = trace_now();
  std::optional<TraceScope> phase;  // --trace: the step's phases around the executor's actions
  phase.emplace("phase", "batch");
  MemoryTracker::reset_peaks();
  Batch global{tc.batch_size, tc.seq_len, {}, {}};
  global.inputs.resize(static_cast<size_t>(global.rows * global.T));
  global.targets.resize(global.inputs.size());
  sample_rows(train_file, tc.seed, step, global.rows, global.T, 0, global.rows, global.inputs.data(),
              global.targets.data());
  Batch mine = shard_batch(mesh, global, RowSplit::dp, model.first().canonical_cp());
  int64_t valid = 0;
  for (int32_t& t : mine.targets) {
    if (t == cfg.data.ignore_id) t = kIgnoreIndex;
    valid += t != kIgnoreIndex;
  }
  // The loss is a mean over the GLOBAL batch's valid tokens; the votes ride along (StepVotes).
  const int64_t n = votes ? 1 + kVotes : 1;
  int64_t counts[1 + kVotes] = {valid};
  if (votes) put_votes(*votes, counts + 1);
  sum_over_dp_cp(mesh, counts, "valid tokens", n);
  valid = counts[0];
  for (auto& c : model.chunks)  // dropout's masks are keyed by (seed, step); evaluation runs without
    c->set_dropout(tc.seed, step);
  phase.reset();
  if (model.fingerprint) model.fingerprint->begin_step(step);
  double loss_sum = run_pass(model, mine, valid);
  phase.emplace("phase", "reduce");
  for (auto& c : model.chunks)
    c->clear_dropout();
  sum_tied_embedding(mesh, model.tied_store, cfg.parsed().reduction == Reduction::canonical);
  if (model.fingerprint) {  // --fingerprint: the gradients after every reduction, before clipping
    model.fingerprint->end_pass();
    model.fingerprint->record_grads(model, mesh, step);
  }
  const bool canonical = cfg.parsed().reduction == Reduction::canonical;
  if (canonical) {
    loss_sum = exact_total(model.executor->loss_exact(), {mesh.pp_group(), mesh.dp_cp_group()}, "loss");
  } else {
    sum_over(mesh.pp_group(), &loss_sum, "pp sum");  // only the last stage has a loss
    sum_over_dp_cp(mesh, &loss_sum, "loss");
  }
  double norm[1 + kVotes] = {0.0};  // Σ g², then the votes (small counts: exact in double)
  for (auto& c : model.chunks)
    if (!canonical) norm[0] += c->store().grad_sum_squares();
  for (int64_t i = 1; i < n; ++i)
    norm[i] = static_cast<double>(counts[i]);
  sum_over(mesh.tp_group(), norm, "grad norm", n);  // each tp rank counts its shard and one copy of the rest
  sum_over(mesh.pp_group(), norm, "pp sum", n);
  const double sum_sq = canonical ? exact_grad_sum_squares(model, mesh) : norm[0];
  if (votes)
    *votes = {static_cast<int64_t>(norm[1]), static_cast<int64_t>(norm[2]), static_cast<int64_t>(norm[3])};

  StepStats s;
  s.step = step;
  s.loss = valid > 0 ? loss_sum / static_cast<double>(valid) : 0.0;
  s.lr = lr;
  s.grad_norm = std::sqrt(sum_sq);
  s.tokens = valid;
  phase.reset();
  s.start_s = start_s;
  s.optimizer_start_s = trace_now();
  {
    const TraceScope span("optimizer", "optimizer");
    update(model, mesh, tc, s);
  }
  s.optimizer_s = trace_now() - s.optimizer_start_s;
  s.step_time_s = timer.seconds();
  s.cpu_s = process_cpu_seconds() - cpu_start_s;
  s.tokens_per_s = static_cast<double>(tc.batch_size * tc.seq_len) / s.step_time_s;
  s.mem_peak_bytes = MemoryTracker::stats().total_peak;
  return s;
}

double validation_loss(TrainModel& model, const RunMesh& mesh, const TrainConfig& tc,
                       const TokenFile& val_file) {
  auto forward = [&](const int32_t* in, const int32_t* tg, int64_t b, int64_t t) {
    Batch global{b, t, {in, in + b * t}, {tg, tg + b * t}};
    const Batch mine = shard_batch(mesh, global, RowSplit::none, model.first().canonical_cp());
    double sum = model.executor->forward_loss(mine.inputs.data(), mine.targets.data(), mine.rows, mine.T);
    sum_over(mesh.cp_group(), &sum, "eval loss");
    return sum;
  };
  return evaluate_loss(forward, val_file, tc.seq_len, tc.eval_windows, tc.microbatch_size);
}

}  // namespace mt
