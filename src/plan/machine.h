// A machine description: what the planner needs to know of a cluster to
// predict a layout's step time (docs/PLANNER.md, "Machine descriptions").
// Either measured here by `meshtrain calibrate` or one of the built-in
// profiles of clusters we cannot run on, each number with its source in
// docs/PLANNER.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt::plan {

// A link or a collective as latency + bytes / bandwidth.
struct AlphaBeta {
  double alpha_s = 0;      // seconds per message (per step of a ring)
  double bytes_per_s = 1;  // bandwidth per device, one direction
  double time(double bytes) const { return alpha_s + bytes / bytes_per_s; }
};

// A fitted collective of `ranks` ranks within a node: time = α + bytes / β,
// bytes = the buffer as the op's contract counts it (all-reduce: the buffer;
// all-gather: the gathered output; reduce-scatter: the input; all-to-all: the
// send buffer; send: the message).
// across: the group spans the nodes (ranks / nodes of them on each), with
// `flows` such groups running the same call at once, as a layout's groups do
// (calibrate across nodes measures all-reduces so; the planner takes them for
// a group that crosses the link, plan/collectives.cpp collective_time).
struct CollectiveFit {
  std::string op;  // all_reduce | all_gather | reduce_scatter | all_to_all | send_recv
  int ranks = 2;
  AlphaBeta fit;
  bool across = false;
  int flows = 1;
};

// GEMM rate of one shape (C[m, n] from k), the node's: the sum over the
// `ranks` ranks that ran it at once, each with `threads` threads (ranks 0: a
// rate for any number of ranks, as files without the field mean).
struct GemmRate {
  int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;
  int ranks = 0, threads = 0;
};

// One decoder layer's non-GEMM kernels, forward + backward, measured by
// calibrate at the shape of its --config (batch sequences of seq_len tokens)
// while `ranks` ranks of `threads` threads each ran them at once: node
// seconds per call (a rank's seconds ÷ ranks); 0 when not measured.
// attention_half_s: the attention of batch sequences of seq_len / 2 (a cp 2
// ring's block). optimizer_s: node seconds per parameter of the step's pass
// over the state (the gradient's sum of squares, clipping, AdamW).
struct LayerKernels {
  int64_t batch = 0, seq_len = 0, d_model = 0, ffn_hidden = 0, heads = 0;
  double attention_s = 0, attention_half_s = 0, elementwise_s = 0, optimizer_s = 0;
  int ranks = 0, threads = 0;
};

struct Machine {
  std::string name, description;
  int devices_per_node = 1;
  // Dense peak per device (bf16 for accelerators, fp32 SGEMM for a CPU node
  // measured here) and the fraction of it large GEMMs achieve (an assumption
  // for the built-in profiles, 1 for measured rates).
  double peak_flops = 1e12;
  double gemm_efficiency = 1.0;
  // true: the devices of a node share one compute pool (a CPU: ranks split
  // the cores, so a rank's rate is the node's rate / ranks on the node).
  bool shared_compute = false;
  double memory_bytes = 80e9;        // per device (the CPU node's, for shared_compute)
  double memory_bytes_per_s = 2e12;  // per device: what element-wise work moves at
  AlphaBeta intra, inter;            // a device's link within and between nodes
  // true: `inter` is the node's one link, shared by the flows its ranks send
  // across at once (an emulated cluster's veth, docs/CLUSTER.md); false: each
  // device has its own (a NIC per accelerator). Read by cp's all-to-alls and
  // ring hops (plan/cost.cpp) and the hierarchical all-reduce's rings across
  // (plan/collectives.cpp); the other collectives take `inter` per device.
  bool shared_link = false;
  // Share of a collective that can run behind independent compute (1: fully
  // asynchronous engines; 0: MPI on CPUs progresses only inside its calls).
  double overlap = 1.0;
  std::string precision = "bf16";  // bf16: mixed precision sizes; fp32: as meshtrain trains here
  std::vector<GemmRate> gemm;
  std::vector<CollectiveFit> collectives;
  std::vector<LayerKernels> kernels;  // one per measured number of ranks on the node

  // The measured number of ranks on the node that stands for `ranks_on_node`:
  // the largest measured one not above it (else the smallest); 0 when the
  // measurements do not say.
  int measured_ranks(int ranks_on_node) const;
  // Rate of a GEMM of this shape for one of `ranks_on_node` ranks (among the
  // rates measured with measured_ranks(ranks_on_node) ranks at once, the shape
  // nearest in log-space; else the roofline of peak × efficiency and the
  // memory rate), a node's rate shared by its ranks when shared_compute.
  double gemm_rate(int64_t m, int64_t n, int64_t k, int ranks_on_node) const;
  // The layer kernels measured with measured_ranks(ranks_on_node) ranks, or null.
  const LayerKernels* layer_kernels(int ranks_on_node) const;
  // Memory one of `devices` ranks may use: the device's, or the node's share
  // when the ranks share one (shared_compute).
  double rank_memory_bytes(int64_t devices) const;
  // The fitted collective for (op, ranks), or null.
  const CollectiveFit* fit(const std::string& op, int ranks) const;
  // A fit of `ranks` across the nodes with `flows` such groups at once, or null.
  const CollectiveFit* fit_across(const std::string& op, int ranks, int flows) const;
};

// Names of the built-in profiles ("a100-8x-ib", ...).
std::vector<std::string> builtin_machine_names();
// A built-in profile by name, or a machine description file (JSON); a
// ConfigError names the value and the known profiles otherwise.
Machine load_machine(const std::string& name_or_file);
Machine machine_from_json(const std::string& text, const std::string& source);
std::string machine_to_json(const Machine& m);

}  // namespace mt::plan
