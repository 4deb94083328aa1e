// `meshtrain compare A B` of two fingerprint files (docs/FINGERPRINT.md
// "Comparing two runs"): each tensor's pieces merged into its checksum and
// float64 sums, then the first tensor of a step where the runs differ in bits
// and the first where they differ beyond the bound.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "train/fingerprint.h"
#include "train/fingerprint_hash.h"

namespace mt {

namespace {

constexpr double kUnit = 0x1p-24;  // fp32's unit roundoff

struct Run {
  std::string path, layout;
  int64_t reduction_length = 0, layers = -1;
  // (step, order, tensor, seq) → the pieces of that tensor and sequence, every rank's
  std::map<std::tuple<int64_t, int64_t, std::string, int64_t>, std::vector<FingerprintPiece>> tensors;
};

// One tensor of one sequence, its replicas merged (pieces with the same
// coordinates are one piece held by several ranks).
struct Merged {
  int64_t count = 0;
  uint64_t coords = 0, values = 0;
  double sum = 0, sumsq = 0, sumabs = 0;
  bool replicas_agree = true;
  std::map<std::pair<uint64_t, int64_t>, std::vector<const FingerprintPiece*>> groups;  // (coords, count)
};

Merged merge(const std::vector<FingerprintPiece>& pieces) {
  Merged m;
  for (const FingerprintPiece& p : pieces)
    m.groups[{p.coords, p.count}].push_back(&p);
  for (const auto& [key, g] : m.groups) {
    const FingerprintPiece& first = *g.front();
    for (const FingerprintPiece* p : g)
      m.replicas_agree = m.replicas_agree && p->values == first.values;
    m.count += first.count;
    m.coords += first.coords;
    m.values += first.values;
    m.sum += first.sum;
    m.sumsq += first.sumsq;
    m.sumabs += first.sumabs;
  }
  return m;
}

FingerprintPiece parse_piece(const std::string& line, const std::string& path) {
  FingerprintPiece p;
  std::istringstream is(line);
  std::string coords, values;
  is >> p.step >> p.order >> p.phase >> p.layer >> p.name >> p.seq >> p.rank >> p.count >> coords >> values >>
      p.sum >> p.sumsq >> p.sumabs;
  MT_REQUIRE(!is.fail() && coords.size() == 16 && values.size() == 16, ConfigError, "fingerprint file '",
             path, "': malformed record '", line, "'");
  p.coords = std::stoull(coords, nullptr, 16);
  p.values = std::stoull(values, nullptr, 16);
  return p;
}

Run read_run(const std::string& path) {
  std::ifstream in(path);
  MT_REQUIRE(in.good(), ConfigError, "cannot open fingerprint file '", path, "'");
  Run r;
  r.path = path;
  std::string line;
  std::getline(in, line);
  MT_REQUIRE(line == std::string(fp::kMagic) + " 1", ConfigError, "'", path,
             "' is not a fingerprint file of version 1 (its first line is '", line, "')");
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("reduction_length ", 0) == 0) {
      r.reduction_length = std::stoll(line.substr(17));
    } else if (line.rfind("layout ", 0) == 0) {
      r.layout = line.substr(7);
    } else if (line.rfind("layers ", 0) == 0) {
      r.layers = std::stoll(line.substr(7));
    } else {
      FingerprintPiece p = parse_piece(line, path);
      r.tensors[{p.step, p.order, p.name, p.seq}].push_back(std::move(p));
    }
  }
  return r;
}

// The ranks whose pieces of a tensor differ from the other run's piece with
// the same coordinates; "" when no piece of `a` has a counterpart in `b` (other layouts).
std::string differing_ranks(const Merged& a, const Merged& b) {
  std::set<int> ranks;
  for (const auto& [key, g] : a.groups) {
    const auto other = b.groups.find(key);
    if (other == b.groups.end()) continue;
    for (const FingerprintPiece* p : g)
      if (p->values != other->second.front()->values) ranks.insert(p->rank);
  }
  std::string out;
  for (int r : ranks) {
    if (!out.empty()) out += ',';
    out += std::to_string(r);
  }
  return out;
}

std::string holders(const std::vector<FingerprintPiece>* pieces) {
  std::set<int> ranks;
  if (pieces != nullptr)
    for (const FingerprintPiece& p : *pieces)
      ranks.insert(p.rank);
  std::string out;
  for (int r : ranks) {
    if (!out.empty()) out += ',';
    out += std::to_string(r);
  }
  return out.empty() ? "none" : out;
}

// "[0, 4) [6, 8)" of a sorted set of sequences; "the whole batch" for −1.
std::string atoms(const std::vector<int64_t>& seqs) {
  if (seqs.size() == 1 && seqs[0] < 0) return "the whole batch";
  std::string out = "sequences";
  for (size_t i = 0; i < seqs.size();) {
    size_t j = i + 1;
    while (j < seqs.size() && seqs[j] == seqs[j - 1] + 1)
      ++j;
    out += " [";
    out += std::to_string(seqs[i]);
    out += ", ";
    out += std::to_string(seqs[j - 1] + 1);
    out += ')';
    i = j;
  }
  return out;
}

// What one tensor's comparison found.
struct Finding {
  bool bits = false, beyond = false;
  std::string why;   // beyond: the numbers
  double ratio = 0;  // the larger of the two sums' difference / bound
  std::string ranks_a, ranks_b;
};

Finding compare_tensor(const std::vector<FingerprintPiece>* pa, const std::vector<FingerprintPiece>* pb,
                       double eps) {
  Finding f;
  auto unplaced = [](const std::vector<FingerprintPiece>* p) {
    return p != nullptr &&
           std::any_of(p->begin(), p->end(), [](const FingerprintPiece& x) { return x.count < 0; });
  };
  if (unplaced(pa) || unplaced(pb)) return f;  // Partial in one run (not placed): not compared
  if (pa == nullptr || pb == nullptr) {
    f.bits = f.beyond = true;
    f.why = std::string("recorded in run ") + (pa ? "A" : "B") + " only";
    return f;
  }
  const Merged a = merge(*pa), b = merge(*pb);
  f.ranks_a = differing_ranks(a, b);
  f.ranks_b = differing_ranks(b, a);
  if (a.count != b.count || a.coords != b.coords) {
    f.bits = f.beyond = true;
    f.why = "the runs recorded different elements (" + std::to_string(a.count) + " vs " +
            std::to_string(b.count) + ")";
    return f;
  }
  f.bits = a.values != b.values || !a.replicas_agree || !b.replicas_agree;
  const double ds = std::fabs(a.sum - b.sum), bs = eps * (a.sumabs + b.sumabs);
  const double dq = std::fabs(a.sumsq - b.sumsq), bq = 2 * eps * (a.sumsq + b.sumsq);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "|sum A - sum B| = %.3e (bound %.3e), |sumsq A - sumsq B| = %.3e (bound %.3e)", ds, bs, dq,
                bq);
  f.why = buf;
  f.ratio =
      std::max(bs > 0 ? ds / bs : (ds > 0 ? HUGE_VAL : 0.0), bq > 0 ? dq / bq : (dq > 0 ? HUGE_VAL : 0.0));
  f.beyond = !(ds <= bs) || !(dq <= bq) || !a.replicas_agree || !b.replicas_agree;
  if (!a.replicas_agree || !b.replicas_agree)
    f.why += std::string("; replicas of one piece disagree in run ") + (a.replicas_agree ? "B" : "A");
  return f;
}

std::string describe(const FingerprintPiece& p, const std::vector<int64_t>& seqs, const Finding& f,
                     const std::string& held_a, const std::string& held_b) {
  std::ostringstream os;
  os << "step " << p.step << ", " << p.phase;
  if (p.phase != "grad") os << ", layer " << p.layer;
  os << ", tensor " << p.name << ", " << atoms(seqs) << "; held by ranks " << held_a << " in A, " << held_b
     << " in B";
  if (!f.ranks_a.empty() || !f.ranks_b.empty())
    os << "; the pieces that differ: A rank(s) " << (f.ranks_a.empty() ? "-" : f.ranks_a) << ", B rank(s) "
       << (f.ranks_b.empty() ? "-" : f.ranks_b);
  return os.str();
}

}  // namespace

bool is_fingerprint_file(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  return in.good() && std::getline(in, line) && line.rfind(fp::kMagic, 0) == 0;
}

FingerprintCompare compare_fingerprints(const std::string& path_a, const std::string& path_b, bool bitwise) {
  const Run a = read_run(path_a), b = read_run(path_b);
  MT_REQUIRE(a.layers == b.layers && a.reduction_length == b.reduction_length, ConfigError,
             "fingerprints of two different models: '", path_a, "' has ", a.layers,
             " layers and reduction length ", a.reduction_length, ", '", path_b, "' ", b.layers, " and ",
             b.reduction_length);
  std::set<std::tuple<int64_t, int64_t, std::string, int64_t>> keys;
  for (const auto& [k, v] : a.tensors)
    keys.insert(k);
  for (const auto& [k, v] : b.tensors)
    keys.insert(k);
  const double K = static_cast<double>(std::max(a.reduction_length, b.reduction_length));
  std::ostringstream os;
  os << "fingerprints: A '" << a.path << "' (" << a.layout << "), B '" << b.path << "' (" << b.layout
     << ")\n";
  std::string first_bits, first_beyond, worst;
  double worst_ratio = -1;
  int64_t depth = 0, tensors = 0, differ = 0;
  for (auto it = keys.begin(); it != keys.end();) {  // one (step, order): one tensor, every sequence
    const auto [step, order, name, seq0] = *it;
    ++depth;
    ++tensors;
    const double eps = static_cast<double>(depth) * K * kUnit;
    std::vector<int64_t> bits_seqs, beyond_seqs;
    Finding bits_f, beyond_f;
    const FingerprintPiece* any = nullptr;
    std::vector<FingerprintPiece> held_a, held_b;
    for (; it != keys.end() && std::get<0>(*it) == step && std::get<1>(*it) == order &&
           std::get<2>(*it) == name;
         ++it) {
      const auto fa = a.tensors.find(*it), fb = b.tensors.find(*it);
      const auto* pa = fa == a.tensors.end() ? nullptr : &fa->second;
      const auto* pb = fb == b.tensors.end() ? nullptr : &fb->second;
      if (any == nullptr) any = pa ? &pa->front() : &pb->front();
      if (pa) held_a.insert(held_a.end(), pa->begin(), pa->end());
      if (pb) held_b.insert(held_b.end(), pb->begin(), pb->end());
      const Finding f = compare_tensor(pa, pb, eps);
      if (f.ratio > worst_ratio) {
        worst_ratio = f.ratio;
        worst = "step " + std::to_string(step) + ", " + any->phase + ", layer " + std::to_string(any->layer) +
                ", tensor " + name + ", sequence " + std::to_string(std::get<3>(*it));
      }
      if (f.bits) {
        if (bits_seqs.empty()) bits_f = f;
        bits_seqs.push_back(std::get<3>(*it));
      }
      if (f.beyond) {
        if (beyond_seqs.empty()) beyond_f = f;
        beyond_seqs.push_back(std::get<3>(*it));
      }
    }
    differ += !bits_seqs.empty();
    if (first_bits.empty() && !bits_seqs.empty())
      first_bits = describe(*any, bits_seqs, bits_f, holders(&held_a), holders(&held_b));
    if (first_beyond.empty() && !beyond_seqs.empty())
      first_beyond =
          describe(*any, beyond_seqs, beyond_f, holders(&held_a), holders(&held_b)) + "; " + beyond_f.why;
  }
  os << "compared " << tensors << " tensors (step, site) of " << keys.size()
     << " (tensor, sequence) records; " << differ << " differ in bits\n";
  os << "first bitwise difference: "
     << (first_bits.empty() ? "none (every tensor is bitwise equal)" : first_bits) << "\n";
  os << "first difference beyond its bound: " << (first_beyond.empty() ? "none" : first_beyond) << "\n";
  char ratio[64];
  std::snprintf(ratio, sizeof ratio, "%.3e", std::max(worst_ratio, 0.0));
  os << "largest difference / bound: " << ratio << (worst.empty() ? "" : " at " + worst) << "\n";
  FingerprintCompare r;
  r.ok = bitwise ? first_bits.empty() : first_beyond.empty();
  os << (r.ok ? "ok" : "DIFFERENT")
     << (bitwise ? " (bitwise)"
         : r.ok  ? " (within the bound)"
                 : " (beyond the bound)")
     << "\n";
  r.report = os.str();
  return r;
}

}  // namespace mt
