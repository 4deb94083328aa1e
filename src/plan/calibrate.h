// `meshtrain calibrate`: this machine's description, measured — GEMM rates by
// shape, the memory rate, and each collective's α + bytes/β by group size
// (docs/PLANNER.md, "Calibration"; the file format is in docs/FORMATS.md).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/group.h"
#include "model/config.h"
#include "plan/machine.h"

namespace mt::plan {

struct CalibrateOptions {
  // The model whose GEMM shapes are measured besides the square ones (at
  // `tokens` rows, and with the column dims halved as tp 2 runs them).
  bool has_model = false;
  ModelConfig model;
  int64_t tokens = 512;  // microbatch × seq_len
  int64_t microbatch = 1, seq_len = 512;
  double seconds_per_shape = 0.2;  // sets the GEMM windows' length
  int rounds = 5;                  // every compute rate: the best of this many rounds
  std::vector<int64_t> message_bytes{4096, 65536, 1 << 20, 8 << 20};
};

// Collective over `world`: the compute rates for r = 1, 2, 4, … ranks on the
// node (up to the world), the first r ranks measuring at the same moment with
// the threads a training job of r ranks gives each (cores ÷ r) while the
// others sleep, in windows that last as long as the slowest rank; the median
// window, then the best over `rounds`, gives the node's rate. The
// collectives are fitted for groups of 2 and 4 ranks as far as the world
// allows. The result is complete on rank 0.
Machine calibrate(Group& world, const CalibrateOptions& o);

// Fit of time = α + bytes / β over (bytes, seconds) pairs, least squares of
// the relative error.
AlphaBeta fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds);

}  // namespace mt::plan
