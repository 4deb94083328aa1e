#include "pipeline/render.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace mt::pp {

namespace {

std::string cell_label(const Schedule& s, const Action& a) {
  // Appends, not "x" + std::string: GCC 12 warns falsely (-Wrestrict) on the latter.
  std::string label(1, a.op == Op::forward ? 'F' : a.op == Op::weight ? 'W' : 'B');
  label += std::to_string(a.microbatch);
  if (s.v > 1) {
    const int chunk = s.chunk_of(a.vstage);
    if (s.v <= 26) {
      label += static_cast<char>('a' + chunk);
    } else {
      label += '.';
      label += std::to_string(chunk);
    }
  }
  return label;
}

std::string pad(const std::string& text, size_t width) {
  return text + std::string(width > text.size() ? width - text.size() : 0, ' ');
}

std::string fixed4(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", x);
  return buf;
}

}  // namespace

std::string render_grid(const Schedule& s, const SimResult& sim) {
  MT_CHECK(sim.ok, "render_grid needs a schedule that simulates: ", sim.error);
  const size_t T = static_cast<size_t>(sim.makespan);
  std::vector<std::vector<std::string>> grid(static_cast<size_t>(s.pp), std::vector<std::string>(T, "."));
  size_t width = std::to_string(T > 0 ? T - 1 : 0).size();
  for (size_t r = 0; r < grid.size(); ++r) {
    for (size_t i = 0; i < s.ranks[r].size(); ++i) {
      const Action& a = s.ranks[r][i];
      if (a.op != Op::forward && a.op != Op::backward && a.op != Op::weight) continue;
      const std::string label = cell_label(s, a);
      width = std::max(width, label.size());
      const int length = a.op == Op::forward  ? sim.costs.forward
                         : a.op == Op::weight ? sim.costs.weight
                                              : sim.costs.backward;
      for (int u = 0; u < length; ++u)
        grid[r][static_cast<size_t>(sim.time[r][i] + u)] = label;
    }
  }
  const std::string last_rank = "rank " + std::to_string(s.pp - 1);
  const size_t head = last_rank.size() + 2;

  std::ostringstream os;
  os << schedule_kind_name(s.kind) << " schedule: pp " << s.pp << ", v " << s.v << ", " << s.microbatches
     << " microbatches; F = forward (" << sim.costs.forward
     << " time unit), B = " << (s.splits_backward() ? "input gradient (" : "backward (") << sim.costs.backward
     << (s.splits_backward() ? " unit), " : " units), ");
  if (s.splits_backward()) os << "W = weight gradients (" << sim.costs.weight << " unit), ";
  os << ". = idle\n";
  std::string line = pad("time", head);
  for (size_t t = 0; t < T; ++t)
    line += pad(std::to_string(t), width + 1);
  os << line.substr(0, line.find_last_not_of(' ') + 1) << "\n";
  for (size_t r = 0; r < grid.size(); ++r) {
    line = pad("rank " + std::to_string(r), head);
    for (const std::string& c : grid[r])
      line += pad(c, width + 1);
    os << line.substr(0, line.find_last_not_of(' ') + 1) << "\n";
  }

  const double ideal = schedule_bubble(s.kind, s.pp, s.v, s.microbatches);
  os << "\nmakespan " << sim.makespan << " time units; bubble = idle / makespan, ideal = "
     << (s.splits_backward() ? "(pp-1)/(3m+pp-1)" : "(pp-1)/(v*m+pp-1)") << " = " << fixed4(ideal) << "\n";
  os << pad("rank", head) << "busy  idle  bubble  ideal   peak activation sets in flight"
     << (s.v > 1 ? " (microbatch, chunk)" : "") << "\n";
  for (size_t r = 0; r < grid.size(); ++r) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%-4d  %-4d  %s  %s  %d", sim.busy[r], sim.makespan - sim.busy[r],
                  fixed4(sim.bubble[r]).c_str(), fixed4(ideal).c_str(), sim.peak_in_flight[r]);
    os << pad("rank " + std::to_string(r), head) << buf << "\n";
  }
  return os.str();
}

}  // namespace mt::pp
