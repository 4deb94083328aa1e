// The report's communication time per axis per step, and the axes that
// slowed down during a run (a link that degraded mid-run: docs/CLUSTER.md).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cli/report.h"

namespace mt::report {

namespace {
using json = nlohmann::json;

// Per axis, per step: the most any rank waited for that axis's calls (ms).
std::map<std::string, std::map<int64_t, double>> exposed_by_axis(const Run& r) {
  std::map<std::string, std::map<int64_t, double>> out;
  for (const json& l : r.ranks) {
    const int64_t step = l.value("step", int64_t{0});
    for (const auto& [axis, s] : field(field(l, "time_s"), "comm_exposed").items()) {
      double& ms = out[axis][step];
      ms = std::max(ms, 1e3 * s.get<double>());
    }
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::string slow_axes(const std::vector<Run>& runs) {
  std::string out;
  for (const Run& r : runs) {
    for (const auto& [axis, by_step] : exposed_by_axis(r)) {
      std::vector<std::pair<int64_t, double>> steps(by_step.begin(), by_step.end());
      // The baseline: the first quarter of the run, its first step (the warm-up) left out.
      const size_t q = steps.size() / 4;
      if (q < 2) continue;
      std::vector<double> early;
      for (size_t i = 1; i <= q; ++i)
        early.push_back(steps[i].second);
      const double base = median(early);
      std::vector<double> slow;
      int64_t first = -1, last = -1;
      for (size_t i = q + 1; i < steps.size(); ++i) {
        if (steps[i].second <= kSlowRatio * base || steps[i].second - base < kSlowFloorMs) continue;
        slow.push_back(steps[i].second);
        if (first < 0) first = steps[i].first;
        last = steps[i].first;
      }
      if (slow.size() < 2) continue;
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "%s%s, axis %s: %zu of steps %lld-%lld waited %.1fx the median of steps %lld-%lld "
                    "(%.1f ms against %.1f ms)",
                    out.empty() ? "" : "; ", r.name.c_str(), axis.c_str(), slow.size(),
                    static_cast<long long>(first), static_cast<long long>(last), median(slow) / base,
                    static_cast<long long>(steps[1].first), static_cast<long long>(steps[q].first),
                    median(slow), base);
      out += buf;
    }
  }
  return out;
}

Chart comm_time_chart(const std::vector<Run>& runs) {
  json rows = json::array();
  for (const Run& r : runs)
    for (const auto& [axis, by_step] : exposed_by_axis(r))
      for (const auto& [step, ms] : by_step)
        rows.push_back({{"x", step}, {"y", ms}, {"s", r.name + " " + axis}});
  const std::string found = slow_axes(runs);
  char rule[200];
  std::snprintf(rule, sizeof rule,
                "An axis is called slower when at least 2 steps after the first quarter of a run wait more "
                "than %gx, and %g ms more than, the median of that quarter (its first step left out). ",
                kSlowRatio, kSlowFloorMs);
  return {
      "Communication time per axis per step",
      "The most any rank waited for each axis's calls in a step (exposed communication; the pipeline's own "
      "transfers are its bubble). A link that slows mid-run shows as its axis rising. " +
          std::string(rule) + (found.empty() ? "No axis slowed." : "Slower axes: " + found + "."),
      line_spec(rows, "step", "ms")};
}

}  // namespace mt::report
