#include "model/recompute.h"

#include <sstream>

#include "core/error.h"

namespace mt {

namespace {

constexpr struct {
  const char* name;
  RecomputeModule module;
} kModules[] = {{"attention", RecomputeModule::attention},
                {"mlp", RecomputeModule::mlp},
                {"norms", RecomputeModule::norms}};

}  // namespace

Recompute parse_recompute(const std::string& mode, const std::string& modules) {
  if (mode == "none" || mode == "false") return {};
  if (mode == "full" || mode == "true") return Recompute::full_layer();
  MT_REQUIRE(mode == "selective", ConfigError, "train.recompute = '", mode,
             "' is not a recomputation mode (none, full, selective; true = full, false = none)");
  Recompute r{Recompute::Mode::selective, 0};
  std::istringstream in(modules);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t first = item.find_first_not_of(' '), last = item.find_last_not_of(' ');
    item = first == std::string::npos ? "" : item.substr(first, last - first + 1);
    unsigned bit = 0;
    for (const auto& m : kModules)
      if (item == m.name) bit = static_cast<unsigned>(m.module);
    MT_REQUIRE(bit != 0, ConfigError, "train.recompute_modules names '", item,
               "', which is not a module (attention, mlp, norms)");
    r.modules |= bit;
  }
  MT_REQUIRE(r.modules != 0, ConfigError,
             "train.recompute = selective needs train.recompute_modules to name at least one module "
             "(attention, mlp, norms)");
  return r;
}

std::string to_string(const Recompute& r) {
  if (!r.any()) return "none";
  if (r.full()) return "full";
  std::string names;
  for (const auto& m : kModules) {
    if (!r.recomputes(m.module)) continue;
    if (!names.empty()) names.push_back(',');
    names.append(m.name);
  }
  return "selective(" + names + ")";
}

}  // namespace mt
