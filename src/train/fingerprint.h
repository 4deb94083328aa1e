// train --fingerprint FILE and its comparison (docs/FINGERPRINT.md): per step,
// layer and site, a checksum of every activation, activation gradient and
// parameter gradient at layout-free coordinates, so that two runs of any two
// layouts can be held against each other tensor by tensor, and `meshtrain
// compare` names the first step, atoms (sequences), layer, site, tensor and
// rank where they part.
//
// Coordinates. Each element of a global tensor has a coordinate: (global
// sequence, position, global column) for an activation, its row-major index
// in the full parameter for a parameter gradient. Each rank hashes the
// elements it holds, each element keyed by its coordinate and its bits, and
// adds the hashes (mod 2^64) per sequence and column span into one piece; a
// tensor's checksum is the sum of its pieces, each counted once (replicas,
// pieces with the same coordinates, agree or are reported), so it is the same
// whatever the layout cut the tensor into when the values are the same bits.
// Each piece also carries float64 sums (Σv, Σv², Σ|v|) for the bound of the
// default reduction mode.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "parallel/probe.h"

namespace mt {

class RunMesh;
struct TrainModel;

// One piece: what one rank held of one tensor of one sequence (seq −1: a
// parameter gradient, the whole batch's).
struct FingerprintPiece {
  int64_t step = 0, order = 0, layer = 0, seq = 0;
  std::string phase;  // "forward", "backward", "grad"
  std::string name;   // "mid", "qkv", …; a gradient's parameter name
  int rank = 0;
  int64_t count = 0;    // elements
  uint64_t coords = 0;  // Σ hash(coordinate): which elements
  uint64_t values = 0;  // Σ hash(coordinate, bits): their values
  double sum = 0, sumsq = 0, sumabs = 0;
};

class Fingerprint : public ActivationProbe {
 public:
  Fingerprint(const Config& cfg, int world_rank);
  // The records between begin_step and end_pass belong to `step`; outside
  // (evaluation, generation) nothing is recorded.
  void begin_step(int64_t step) {
    step_ = step;
    on_ = true;
  }
  void end_pass() { on_ = false; }
  void record(int64_t layer, std::string_view name, bool grad, const float* v, int64_t rows, int64_t ld,
              const RowCoords& at, const std::vector<ColumnSpan>& cols) override;
  // Every parameter gradient this rank holds after the step's reductions,
  // placed by its state layout (after finish_grads and the tied embedding's sum).
  void record_grads(TrainModel& model, const RunMesh& mesh, int64_t step);
  // Collective over the world: rank 0 writes every rank's pieces to `path`.
  void write(const std::string& path, const RunMesh& mesh) const;

 private:
  int64_t order(bool grad, int64_t layer, std::string_view name) const;

  std::string header_;
  int rank_ = 0;
  int64_t n_layers_ = 0, step_ = 0;
  bool on_ = false;
  std::vector<FingerprintPiece> pieces_;
};

// Whether `path` starts as a fingerprint file does.
bool is_fingerprint_file(const std::string& path);

struct FingerprintCompare {
  bool ok = true;
  std::string report;
};
// Run A against run B (the reference): the first tensor, in the order of a
// step, whose checksum differs (bitwise), and the first whose float64 sums
// differ by more than their bound (docs/FINGERPRINT.md "The bound"); ok when
// no tensor exceeds its bound (bitwise: when no checksum differs at all).
FingerprintCompare compare_fingerprints(const std::string& a, const std::string& b, bool bitwise);

}  // namespace mt
