#include "plan/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "comm/context.h"
#include "comm/nodes.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "cost/memory_estimate.h"
#include "ops/gemm.h"
#include "plan/kernels.h"

namespace mt::plan {

AlphaBeta fit_alpha_beta(const std::vector<double>& x, const std::vector<double>& y) {
  // Weighted by 1/y², i.e. least squares of the relative error, so that the
  // small messages (where α dominates) count as much as the large ones.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = 1.0 / (y[i] * y[i]);
    sw += w, sx += w * x[i], sy += w * y[i], sxx += w * x[i] * x[i], sxy += w * x[i] * y[i];
  }
  const double slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
  const double alpha = (sy - slope * sx) / sw;
  // A negative intercept (noise at small sizes) or slope is clamped: latency
  // is never negative, bandwidth never infinite.
  return {std::max(0.0, alpha), 1.0 / std::max(slope, 1e-15)};
}

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of `fn` for the node: every rank calls it `calls` times
// in the same window (after a barrier), the window lasts as long as its
// slowest rank, and the median of 5 windows over the ranks' calls is kept —
// a rate the node sustains with all ranks busy, not one rank's best moment.
double node_seconds_per_call(Group& world, const std::function<void()>& fn, int calls) {
  fn();  // warm-up
  std::vector<double> windows;
  for (int w = 0; w < 5; ++w) {
    world.barrier("calibrate");
    Timer t;
    for (int c = 0; c < calls; ++c)
      fn();
    double s = t.seconds();
    world.all_reduce(&s, 1, "calibrate", ReduceOp::max);
    windows.push_back(s / double(calls * world.size()));
  }
  return median(windows);
}

// Calls per window for work of `flops`: 2·10⁹ × `seconds` FLOPs (a window of
// about seconds / 5 at 10 GFLOP/s per rank), 1 to 64 calls.
int calls_for(double flops, double seconds) {
  return static_cast<int>(std::clamp(2e9 * seconds / flops, 1.0, 64.0));
}

double gemm_flops_per_s(Group& world, int64_t M, int64_t N, int64_t K, double seconds) {
  std::vector<float> a(static_cast<size_t>(M * K), 0.5f), b(static_cast<size_t>(K * N), 0.25f),
      c(static_cast<size_t>(M * N));
  const double flops = 2.0 * double(M) * double(N) * double(K);
  const double t = node_seconds_per_call(
      world,
      [&] { sgemm(Trans::no, Trans::no, M, N, K, a.data(), K, b.data(), N, c.data(), N, Out::assign); },
      calls_for(flops, seconds));
  return flops / t;
}

// Bytes per second of a = b + s·c over arrays beyond the caches (read two, write one).
double memory_bytes_per_s(Group& world) {
  const size_t n = size_t(8) << 20;
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  const double t = node_seconds_per_call(
      world,
      [&] {
        for (size_t i = 0; i < n; ++i)
          a[i] = b[i] + 0.5f * c[i];
      },
      4);
  return 3.0 * double(n) * sizeof(float) / t;
}

// A barrier whose waiting ranks sleep between polls: a rank spinning in MPI
// would take a core from the ranks being timed.
void quiet_barrier(Group& world) {
  int32_t token = 0;
  Work w = world.all_reduce_async(&token, 1, ElemType::i32, ReduceOp::sum, "calibrate");
  while (!w.test())
    std::this_thread::sleep_for(std::chrono::microseconds(500));
}

// The rates of the node while `ranks` ranks (the first of the world) run at
// once, each with `threads` threads, as a training job of that many ranks
// here would: square GEMMs (the best case), the model's layer GEMMs as a step
// runs them (rows of a microbatch and of half of one, columns whole and split
// tp 2), its layer kernels and optimizer pass. The other ranks sleep.
void measure_with_ranks(Group& world, const CalibrateOptions& o, int ranks, int threads, Machine& m) {
  const bool member = world.rank() < ranks;
  Group g = world.split(member ? 0 : 1, world.rank(), "calibrate");
  if (member) {
    const int saved = num_threads();
    set_num_threads(threads);
    const auto tag = [&](GemmRate r) {
      r.ranks = ranks;
      r.threads = threads;
      return r;
    };
    for (int64_t n : {256, 512, 1024})
      m.gemm.push_back(tag({n, n, n, gemm_flops_per_s(g, n, n, n, o.seconds_per_shape)}));
    if (o.has_model) {
      const NodeSeconds seconds = [&](const std::function<void()>& fn) {
        return node_seconds_per_call(g, fn, 3);
      };
      for (int64_t rows : {o.tokens, std::max<int64_t>(1, o.tokens / 2)})
        for (int64_t tp : {1, 2})
          for (const GemmRate& r : measure_layer_gemms(o.model, rows, tp, seconds))
            m.gemm.push_back(tag(r));
      LayerKernels k = measure_layer_kernels(o.model, o.microbatch, o.seq_len, seconds);
      k.optimizer_s = measure_optimizer_pass(checked_param_count(o.model), seconds);
      k.ranks = ranks, k.threads = threads;
      m.kernels.push_back(k);
    }
    set_num_threads(saved);
  }
  quiet_barrier(world);
}

// Each rate the best over the rounds (every round measures the same entries
// in the same order; a round's rate is already its median window): other work
// on the shared cores only ever slows a round, and a burst of it rarely spans
// them all.
void best_over_rounds(const std::vector<Machine>& rounds, Machine& m) {
  const auto best = [&](auto get, bool larger) {
    double b = get(rounds[0]);
    for (const Machine& r : rounds)
      b = larger ? std::max(b, get(r)) : std::min(b, get(r));
    return b;
  };
  m.gemm = rounds[0].gemm;
  for (size_t i = 0; i < m.gemm.size(); ++i)
    m.gemm[i].flops_per_s = best([&](const Machine& r) { return r.gemm[i].flops_per_s; }, true);
  m.kernels = rounds[0].kernels;
  for (size_t i = 0; i < m.kernels.size(); ++i) {
    LayerKernels& k = m.kernels[i];
    k.attention_s = best([&](const Machine& r) { return r.kernels[i].attention_s; }, false);
    k.attention_half_s = best([&](const Machine& r) { return r.kernels[i].attention_half_s; }, false);
    k.elementwise_s = best([&](const Machine& r) { return r.kernels[i].elementwise_s; }, false);
    k.optimizer_s = best([&](const Machine& r) { return r.kernels[i].optimizer_s; }, false);
  }
}

// Seconds of one collective of `bytes` over `g`: the best of a fixed number
// of calls, the slowest rank's.
double time_collective(Group& g, const std::string& op, int64_t bytes) {
  const int64_t n = std::max<int64_t>(1, bytes / 4), P = g.size();
  std::vector<float> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
  const int64_t part = std::max<int64_t>(1, n / P);
  const auto run = [&] {
    if (op == "all_reduce") g.all_reduce(send.data(), n, "calibrate");
    if (op == "all_gather") g.all_gather(send.data(), recv.data(), part, ElemType::f32, "calibrate");
    if (op == "reduce_scatter")
      g.reduce_scatter(send.data(), recv.data(), part, ElemType::f32, ReduceOp::sum, "calibrate");
    if (op == "all_to_all") g.all_to_all(send.data(), recv.data(), part, ElemType::f32, "calibrate");
    if (op == "send_recv") {  // ping-pong between ranks 0 and 1: half a round trip
      if (g.rank() == 0) g.send(send.data(), n, ElemType::f32, 1, 7, "calibrate");
      if (g.rank() == 1) g.recv(recv.data(), n, ElemType::f32, 0, 7, "calibrate");
      if (g.rank() == 1) g.send(send.data(), n, ElemType::f32, 0, 8, "calibrate");
      if (g.rank() == 0) g.recv(recv.data(), n, ElemType::f32, 1, 8, "calibrate");
    }
  };
  // The same number of calls on every rank (a time budget would differ
  // between ranks and mismatch the collectives): more for small messages.
  const int reps =
      static_cast<int>(std::clamp<int64_t>((int64_t{16} << 20) / std::max<int64_t>(1, bytes), 3, 40));
  g.barrier("calibrate");
  run();  // warm-up
  double t = 1e30;
  for (int r = 0; r < reps; ++r) {
    Timer timer;
    run();
    t = std::min(t, timer.seconds());
  }
  t /= op == "send_recv" ? 2.0 : 1.0;
  g.all_reduce(&t, 1, "calibrate", ReduceOp::max);
  return t;
}

void measure_collectives(Group& world, const CalibrateOptions& o, Machine& m) {
  for (int ranks : {2, 4}) {
    if (ranks > world.size()) break;
    const bool member = world.rank() < ranks;
    Group g = world.split(member ? 0 : 1, world.rank(), "calibrate");
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}) {
      if (ranks > 2 && std::string(op) == "send_recv") continue;
      std::vector<double> x, y;
      for (int64_t b : o.message_bytes) {
        if (member) y.push_back(time_collective(g, op, b));
        x.push_back(double(b));
      }
      if (member) m.collectives.push_back({op, ranks, fit_alpha_beta(x, y)});
    }
    world.barrier("calibrate");
  }
  if (const CollectiveFit* f = m.fit("all_reduce", 2)) {  // a 2-rank ring all-reduce: 2 α + bytes / β
    m.intra = {f->fit.alpha_s / 2, f->fit.bytes_per_s};
    m.inter = m.intra;  // one machine: no link between nodes measured
  }
}

// The node's rates and collectives over `world`, all of it on one node.
Machine calibrate_node(Group& world, const CalibrateOptions& o) {
  Machine m;
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  m.name = std::string("calibrated:") + host;
  m.description = "measured by meshtrain calibrate over " + std::to_string(world.size()) + " rank(s)";
  m.devices_per_node = 1 << 20;  // every rank runs on this one machine
  m.shared_compute = true;
  m.overlap = 0.0;  // MPI progresses a non-blocking collective only inside its calls here
  m.precision = "fp32";
  // As the trainer (train.threads = 0): a job of r ranks gives each the
  // cores it may run on ÷ r threads. The cores are this rank's (its affinity
  // mask): calibrate under the same mpirun binding as the training runs.
  const int cores = hardware_threads();
  std::vector<Machine> rounds(static_cast<size_t>(std::max(1, o.rounds)));
  for (Machine& round : rounds)
    for (int r = 1; r <= world.size(); r *= 2)
      measure_with_ranks(world, o, r, std::max(1, cores / r), round);
  best_over_rounds(rounds, m);
  // The peak is the best measured rate (small shapes that stay in cache can
  // beat 1024³), so that a predicted MFU stays at most 1.
  m.peak_flops = 0;
  for (const GemmRate& g : m.gemm)
    m.peak_flops = std::max(m.peak_flops, g.flops_per_s);
  m.memory_bytes_per_s = memory_bytes_per_s(world);
  m.memory_bytes = double(std::max<int64_t>(0, available_memory_bytes()));
  m.intra = m.inter = {1e-6, m.memory_bytes_per_s / 2};  // replaced by the fits below when ranks > 1
  measure_collectives(world, o, m);
  return m;
}

// Bytes per second from this rank to its partner on the other of the first
// two nodes (`across` rank 0 to rank 1): 4 messages of `bytes` one way, timed
// to the partner's acknowledgement. One way, so that pairs running at once
// all load the same direction of the link (a ping-pong's pairs could take
// turns on the two directions); the mean over the stream, not its best
// moment, is the rate a step sees under contention.
double one_way_rate(Group& across, int64_t bytes) {
  std::vector<float> buf(static_cast<size_t>(bytes / 4));
  const int me = across.rank(), n = static_cast<int>(buf.size());
  if (me > 1) return 0.0;
  float ack = 0;
  Timer t;
  for (int k = 0; k < 4; ++k) {
    if (me == 0) across.send(buf.data(), n, ElemType::f32, 1, 9, "calibrate");
    if (me == 1) across.recv(buf.data(), n, ElemType::f32, 0, 9, "calibrate");
  }
  if (me == 1) across.send(&ack, 1, ElemType::f32, 0, 10, "calibrate");
  if (me == 0) across.recv(&ack, 1, ElemType::f32, 1, 10, "calibrate");
  return me == 0 ? 4.0 * double(bytes) / t.seconds() : 0.0;
}

// The link between nodes, on rank 0 of every node's ranks (`s.across` of
// index 0): α the one-way time of a 4-byte message, β from 1–16 MiB messages
// with that α (a shaped link passes its burst at line rate, so a least-squares
// line through small and large messages would cross below zero). Then all g
// ranks of each node send at once (g pairs between the same two nodes): g
// flows on one shared link move together what one moves alone, on g links of
// their own g times that; below the midpoint, (1 + g) / 2 times, the flows
// share one link (Machine::shared_link). Every other rank waits asleep.
void measure_link(Group& world, NodeSplit& s, Machine& m) {
  const bool leader = s.node.rank() == 0;
  if (leader) {
    const double alpha = time_collective(s.across, "send_recv", 4);
    double bytes = 0, seconds = 0;
    for (int64_t b : {int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20}) {
      bytes += double(b);
      seconds += time_collective(s.across, "send_recv", b) - alpha;
    }
    m.inter = {alpha, bytes / seconds};
  }
  quiet_barrier(world);
  const int64_t probe = 4 << 20;
  const double alone = leader ? one_way_rate(s.across, probe) : 0.0;
  quiet_barrier(world);
  const double together = s.node.size() > 1 ? one_way_rate(s.across, probe) : 0.0;  // every pair at once
  double rates[2] = {alone, together};
  world.all_reduce(rates, 2, "calibrate", ReduceOp::max);
  const double g = s.node.size();
  m.shared_link = g > 1 && g * rates[1] < (1 + g) / 2 * rates[0];
}

// MPI's all-reduce, reduce-scatter and all-gather over groups that cross the link as a layout's do: positions
// node by node, groups of r ranks taking every (P / r)-th position (so r / n
// on each of the n nodes), all P / r groups in the same call at once; for
// r = n (one rank a node: the hierarchical all-reduce's middle step) up to P
// (the whole world: a flat dp all-reduce, or ZeRO's reduce-scatter and
// gathers). Fitted to α + bytes / β as the node's collectives are (bytes as
// CollectiveFit counts them); CollectiveFit::across, flows = P / r.
void measure_across_all_reduces(Group& world, NodeSplit& s, Machine& m) {
  const int P = world.size(), n = static_cast<int>(s.node_ranks.size()), g = s.node.size();
  const int position = s.node_of[static_cast<size_t>(world.rank())] * g + s.node.rank();
  for (int r = n; r <= P; r *= 2) {
    if (P % r != 0 || g % (r / n) != 0) continue;
    const int flows = P / r;
    Group group = world.split(position % flows, position, "calibrate");
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
      std::vector<double> x, y;
      for (int64_t b : {int64_t{256} << 10, int64_t{1} << 20, int64_t{4} << 20}) {
        quiet_barrier(world);  // every group starts together
        double t = time_collective(group, op, b);
        world.all_reduce(&t, 1, "calibrate", ReduceOp::max);  // a step waits for the slowest group
        y.push_back(t);
        x.push_back(double(b));
      }
      m.collectives.push_back({op, r, fit_alpha_beta(x, y), true, flows});
    }
  }
}

}  // namespace

Machine calibrate(Group& world, const CalibrateOptions& o) {
  const std::vector<int>& nodes = world.context().node_of_world_rank;
  int first = nodes.empty() ? 0 : nodes[static_cast<size_t>(world.world_rank_of(0))];
  bool one_node = true;
  for (int r = 0; r < world.size() && !nodes.empty(); ++r)
    one_node = one_node && nodes[static_cast<size_t>(world.world_rank_of(r))] == first;
  if (one_node) return calibrate_node(world, o);
  // Across nodes: the node's measurements on the first node's ranks while the
  // others wait asleep (on a real cluster the nodes are alike; on the emulated
  // one they share the cores), then the link.
  NodeSplit s = split_by_node(world);
  Machine m;
  if (s.node_of[static_cast<size_t>(world.rank())] == 0) m = calibrate_node(s.node, o);
  quiet_barrier(world);
  measure_link(world, s, m);
  measure_across_all_reduces(world, s, m);
  m.devices_per_node = s.node.size();
  m.description = "measured by meshtrain calibrate over " + std::to_string(world.size()) + " ranks on " +
                  std::to_string(s.node_ranks.size()) + " nodes: the first node's " +
                  std::to_string(s.node.size()) + " ranks, and the link between nodes";
  return m;
}

}  // namespace mt::plan
