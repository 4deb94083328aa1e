// train --fingerprint: the pieces each rank records, and the file rank 0
// writes (docs/FINGERPRINT.md "The file").
#include "train/fingerprint.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "ckpt/checkpoint_slices.h"
#include "core/error.h"
#include "mesh/layout.h"
#include "train/fingerprint_hash.h"
#include "train/run_mesh.h"
#include "train/train_model.h"

namespace mt {

namespace {

// The sites of a layer in the order the step reaches them: forward (the
// embedding as layer −1, the head as layer n_layers), then backward.
constexpr std::array<std::string_view, 11> kForward = {"embed",   "ln1", "qkv", "att",        "mid", "ln2",
                                                       "gate_up", "h",   "out", "final_norm", "loss"};
constexpr std::array<std::string_view, 8> kBackward = {"h",   "gate_up", "ln2", "mid",
                                                       "att", "qkv",     "ln1", "in"};
constexpr int64_t kPerLayer = 16;             // order numbers per layer and phase
constexpr int64_t kPhase = int64_t{1} << 40;  // order numbers per phase

template <size_t N>
int64_t index_in(const std::array<std::string_view, N>& list, std::string_view name) {
  for (size_t i = 0; i < N; ++i)
    if (list[i] == name) return static_cast<int64_t>(i);
  MT_THROW(Error, "--fingerprint: no site '", std::string(name), "' in the step's order");
}

// The longest sum a step computes in fp32: a GEMM's inner dimension, the
// attention's keys, the softmax's vocabulary, a weight gradient's tokens.
int64_t reduction_length(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  const int64_t ffn = std::max(m.ffn_hidden, m.expert_ffn_hidden);
  return std::max(
      {m.d_model, ffn, m.q_dim(), cfg.train.seq_len, m.vocab_size, cfg.train.batch_size * cfg.train.seq_len});
}

std::string piece_line(const FingerprintPiece& p) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%" PRId64 " %" PRId64 " %s %" PRId64 " %s %" PRId64 " %d %" PRId64 " %016" PRIx64
                " %016" PRIx64 " %.17g %.17g %.17g\n",
                p.step, p.order, p.phase.c_str(), p.layer, p.name.c_str(), p.seq, p.rank, p.count, p.coords,
                p.values, p.sum, p.sumsq, p.sumabs);
  return buf;
}

void add_element(FingerprintPiece& p, uint64_t coord, float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  p.count += 1;
  p.coords += coord;
  p.values += fp::value_hash(coord, bits);
  const double d = v;
  p.sum += d;
  p.sumsq += d * d;
  p.sumabs += std::fabs(d);
}

}  // namespace

Fingerprint::Fingerprint(const Config& cfg, int world_rank)
    : rank_(world_rank), n_layers_(cfg.model.n_layers) {
  std::ostringstream h;
  h << fp::kMagic << " 1\n"
    << "reduction_length " << reduction_length(cfg) << "\n"
    << "layers " << n_layers_ << "\n"
    << "layout dp " << cfg.parallel.dp << " tp " << cfg.parallel.tp << " pp " << cfg.parallel.pp << " cp "
    << cfg.parallel.cp << " ep " << cfg.parallel.ep << " zero " << cfg.parallel.zero << " sp "
    << (cfg.parallel.sp ? 1 : 0) << " tp2d '" << cfg.parallel.tp2d << "' microbatch " << cfg.train.microbatch_size << "\n"
    << "# step order phase layer tensor seq rank count coords values sum sumsq sumabs\n";
  header_ = h.str();
}

int64_t Fingerprint::order(bool grad, int64_t layer, std::string_view name) const {
  if (!grad) return (layer + 1) * kPerLayer + index_in(kForward, name);
  return kPhase + (n_layers_ - layer) * kPerLayer + index_in(kBackward, name);
}

void Fingerprint::record(int64_t layer, std::string_view name, bool grad, const float* v, int64_t rows,
                         int64_t ld, const RowCoords& at, const std::vector<ColumnSpan>& cols) {
  if (!on_) return;
  std::map<std::pair<int64_t, size_t>, FingerprintPiece> pieces;  // by (sequence, column span)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t seq = at.seq[r / at.per_seq];
    const int32_t pos = at.pos[r];
    for (size_t s = 0; s < cols.size(); ++s) {
      FingerprintPiece& p = pieces[{seq, s}];
      const ColumnSpan& c = cols[s];
      if (c.partial) p.count = -1;  // a marker: this run cannot place the block
      for (int64_t j = 0; j < c.width && !c.partial; ++j)
        add_element(p, fp::activation_coord(seq, pos, c.global + j), v[r * ld + c.local + j]);
    }
  }
  const int64_t ord = order(grad, layer, name);
  for (auto& [key, p] : pieces) {
    p.step = step_;
    p.order = ord;
    p.layer = layer;
    p.seq = key.first;
    p.phase = grad ? "backward" : "forward";
    const ColumnSpan& c = cols[key.second];
    p.name = c.block < 0 ? std::string(name) : std::string(name) + "/" + std::to_string(c.block);
    p.rank = rank_;
    pieces_.push_back(std::move(p));
  }
}

void Fingerprint::record_grads(TrainModel& model, const RunMesh& mesh, int64_t step) {
  const MeshSizes sizes = run_sizes(mesh);
  const MeshCoords coords = run_coords(mesh);
  const ParamTable global = make_param_table(model.first().config());
  for (auto& chunk : model.chunks) {
    for (const ParamSpec& s : chunk->param_table().specs) {
      if (s.tied_copy) continue;  // the first stage's copy is recorded (both are equal after their sum)
      int64_t n = 0;
      const float* g = chunk->store().local_grad_of(s.name, &n);
      const Layout& lay = n == local_numel(s.state_layout, sizes) ? s.state_layout : s.layout;
      MT_CHECK(n == local_numel(lay, sizes), "--fingerprint: the gradient of ", s.name, " has ", n,
               " elements, its layouts another count");
      const int64_t full = global.find(s.name).numel;
      std::vector<float> values(static_cast<size_t>(full), 0.0f), held(static_cast<size_t>(full), 0.0f);
      const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
      copy_to_full(lay, sizes, coords, g, values.data());
      copy_to_full(lay, sizes, coords, ones.data(), held.data());
      FingerprintPiece p;
      for (int64_t i = 0; i < full; ++i)
        if (held[static_cast<size_t>(i)] != 0.0f)
          add_element(p, fp::param_coord(i), values[static_cast<size_t>(i)]);
      p.step = step;
      p.order = 2 * kPhase + (global.find(s.name).offset);  // the full table's order
      p.layer = -1;
      p.seq = -1;
      p.phase = "grad";
      p.name = s.name;
      p.rank = rank_;
      pieces_.push_back(std::move(p));
    }
  }
}

void Fingerprint::write(const std::string& path, const RunMesh& mesh) const {
  std::string mine;
  for (const FingerprintPiece& p : pieces_)
    mine += piece_line(p);
  std::string all = mine;
  if (Group* world = mesh.world(); world != nullptr && world->size() > 1) {
    int64_t len = static_cast<int64_t>(mine.size());
    world->all_reduce(&len, 1, "fingerprint: longest record", ReduceOp::max);
    const int64_t words = (len + 4) / 4;  // at least one NUL at the end of each rank's text
    std::vector<int32_t> send(static_cast<size_t>(words), 0),
        recv(static_cast<size_t>(words * world->size()));
    std::memcpy(send.data(), mine.data(), mine.size());
    world->all_gather(send.data(), recv.data(), words, ElemType::i32, "fingerprint: records");
    all.clear();
    for (int r = 0; r < world->size(); ++r)
      all += std::string(reinterpret_cast<const char*>(recv.data() + r * words));
  }
  if (mesh.rank != 0) return;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  MT_REQUIRE(out.good(), Error, "--fingerprint: cannot write '", path, "'");
  out << header_ << all;
  out.flush();
  MT_REQUIRE(out.good(), Error, "--fingerprint: writing '", path, "' failed");
}

}  // namespace mt
