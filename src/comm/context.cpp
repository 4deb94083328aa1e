#include "comm/context.h"

#include <cstdio>
#include <string>

namespace mt {

void CommLedger::record(LedgerEntry e) {
  entries_.push_back(std::move(e));
}

std::vector<LedgerEntry> CommLedger::step_entries(int64_t step) const {
  std::vector<LedgerEntry> out;
  for (const LedgerEntry& e : entries_) {
    if (e.step == step) out.push_back(e);
  }
  return out;
}

std::map<std::pair<std::string, std::string>, int64_t> CommLedger::bytes_by_op_axis(int64_t step) const {
  std::map<std::pair<std::string, std::string>, int64_t> out;
  for (const LedgerEntry& e : entries_) {
    if (step < 0 || e.step == step) out[{e.op, e.axis}] += e.bytes;
  }
  return out;
}

std::map<std::string, int64_t> CommLedger::bytes_by_link(int64_t step) const {
  std::map<std::string, int64_t> out;
  for (const LedgerEntry& e : entries_) {
    if ((step < 0 || e.step == step) && !e.link.empty()) out[e.link] += e.bytes;
  }
  return out;
}

std::string CommLedger::summary() const {
  struct Row {
    int64_t calls = 0, elements = 0, bytes = 0;
    double seconds = 0;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Row> rows;
  for (const LedgerEntry& e : entries_) {
    Row& r = rows[{e.op, e.axis, e.link}];
    r.calls += 1;
    r.elements += e.elements;
    r.bytes += e.bytes;
    r.seconds += e.seconds;
  }
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-16s %-12s %-7s %8s %14s %14s %10s\n", "op", "axis", "link", "calls",
                "elements", "bytes", "seconds");
  out += line;
  for (const auto& [key, r] : rows) {
    const auto& [op, axis, link] = key;
    std::snprintf(line, sizeof line, "%-16s %-12s %-7s %8lld %14lld %14lld %10.4f\n", op.c_str(),
                  axis.c_str(), link.empty() ? "-" : link.c_str(), static_cast<long long>(r.calls),
                  static_cast<long long>(r.elements), static_cast<long long>(r.bytes), r.seconds);
    out += line;
  }
  for (const auto& [link, bytes] : bytes_by_link()) {
    std::snprintf(line, sizeof line, "bytes over %-7s %14lld\n", link.c_str(), static_cast<long long>(bytes));
    out += line;
  }
  return out;
}

}  // namespace mt
