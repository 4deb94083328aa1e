#include "train/explain.h"

#include <cctype>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <string_view>
#include <vector>

namespace mt {

namespace {

// Splits "site: pair forward [8, 64]" into the label "site: pair forward" and the
// shape "[8, 64]"; shape is empty when the label does not end in a bracketed
// list of numbers.
void split_shape(std::string_view label, std::string_view& text, std::string_view& shape) {
  text = label;
  shape = {};
  if (label.empty() || label.back() != ']') return;
  const size_t open = label.rfind('[');
  if (open == std::string_view::npos || open + 2 >= label.size()) return;  // "[]" is no shape
  for (size_t i = open + 1; i + 1 < label.size(); ++i) {
    const char c = label[i];
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != ',' && c != ' ') return;
  }
  shape = label.substr(open);
  text = label.substr(0, open);
  while (!text.empty() && text.back() == ' ')
    text.remove_suffix(1);
}

// Text as 32-bit words for the transport (ElemType has no byte type).
std::vector<int32_t> to_words(const std::string& s) {
  std::vector<int32_t> w((s.size() + 3) / 4, 0);
  if (!s.empty()) std::memcpy(w.data(), s.data(), s.size());
  return w;
}

}  // namespace

std::string explain_lines(const CommLedger& ledger, int64_t step, int rank) {
  const std::vector<LedgerEntry> entries = ledger.step_entries(step);
  std::ostringstream os;
  os << "rank " << rank << ": " << entries.size() << " collectives in step " << step << "\n";
  for (const LedgerEntry& e : entries) {
    std::string_view text, shape;
    split_shape(e.label, text, shape);
    os << "rank " << rank << " | " << e.axis << " | " << std::left << std::setw(14) << e.op << " | ";
    if (shape.empty())
      os << "[" << e.elements << "]";
    else
      os << shape;
    os << " | " << e.elements << (e.elements == 1 ? " element | " : " elements | ") << text << "\n";
  }
  return os.str();
}

std::string gather_to_rank0(Group& world, const std::string& mine, std::string_view what) {
  // Recorded outside any step, and the step restored even if a call throws.
  struct StepGuard {
    CommContext& ctx;
    int64_t saved;
    ~StepGuard() { ctx.step = saved; }
  } guard{world.context(), world.context().step};
  world.context().step = -1;
  const std::string lengths_label = std::string(what) + ": text lengths",
                    text_label = std::string(what) + ": text";
  const int P = world.size();
  std::vector<int64_t> lengths(static_cast<size_t>(P), 0);
  const int64_t my_length = static_cast<int64_t>(mine.size());
  world.all_gather(&my_length, lengths.data(), 1, ElemType::i64, lengths_label);
  constexpr int kTag = 7301;
  std::string report;
  if (world.rank() == 0) {
    report = mine;
    for (int r = 1; r < P; ++r) {
      const int64_t n = lengths[static_cast<size_t>(r)];
      if (n == 0) continue;
      std::vector<int32_t> words(static_cast<size_t>((n + 3) / 4));
      world.recv(words.data(), static_cast<int64_t>(words.size()), ElemType::i32, r, kTag, text_label);
      report.append(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(n));
    }
  } else if (my_length > 0) {
    const std::vector<int32_t> words = to_words(mine);
    world.send(words.data(), static_cast<int64_t>(words.size()), ElemType::i32, 0, kTag, text_label);
  }
  return report;
}

std::string explain_report(Group& world, int64_t step) {
  return gather_to_rank0(world, explain_lines(world.context().ledger, step, world.rank()), "explain");
}

}  // namespace mt
