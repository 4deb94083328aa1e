// Vega for the report page. Debian's libjs-vega ships Vega as its separate
// modules (vega-util.min.js, vega-view.min.js, …, each a UMD wrapper), not the
// one-file bundle: the page loads them in dependency order through a small
// CommonJS shim (module, exports, require) and assembles the `vega` namespace
// as Vega's own index does, registering the transforms its charts use.
#include <filesystem>
#include <string>
#include <vector>

#include "cli/report.h"
#include "core/error.h"
#include "core/file.h"

namespace mt::report {

namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  return read_file(path.string(), kMaxTextFile, "Vega module");
}

struct Module {
  const char* name;  // what the others require
  const char* file;  // relative to the Vega folder
};

// Dependency order (each module's require() list comes before it).
const std::vector<Module>& modules() {
  static const std::vector<Module> m = {
      {"vega-util", "vega-util.min.js"},
      {"vega-time", "vega-time.min.js"},
      {"vega-format", "vega-format.min.js"},
      {"topojson-client", "../topojson-client/topojson-client.min.js"},
      {"vega-loader", "vega-loader.browser.js"},
      {"vega-canvas", "vega-canvas.browser.js"},
      {"vega-dataflow", "vega-dataflow.min.js"},
      {"vega-statistics", "vega-statistics.min.js"},
      {"vega-scale", "vega-scale.min.js"},
      {"vega-scenegraph", "vega-scenegraph.min.js"},
      {"vega-expression", "vega-expression.min.js"},
      {"vega-selections", "vega-selection.min.js"},
      {"vega-event-selector", "vega-event-selector.min.js"},
      {"vega-functions", "vega-functions.min.js"},
      {"vega-runtime", "vega-runtime.min.js"},
      {"vega-view", "vega-view.min.js"},
      {"vega-parser", "vega-parser.min.js"},
      {"vega-transforms", "vega-transforms.min.js"},
      {"vega-view-transforms", "vega-view-transforms.min.js"},
      {"vega-encode", "vega-encode.min.js"},
  };
  return m;
}

const char* kPrelude = R"(var __vegaModules = {};
function require(name) {
  if (!(name in __vegaModules)) throw new Error('Vega module ' + name + ' is not in the page');
  return __vegaModules[name];
}
)";

const char* kNamespace = R"(var vega = (function (m) {
  var v = {};
  Object.keys(m).forEach(function (n) { if (n.indexOf('vega-') === 0) Object.assign(v, m[n]); });
  Object.assign(m['vega-dataflow'].transforms, m['vega-transforms'], m['vega-view-transforms'], m['vega-encode']);
  return v;
})(__vegaModules);
)";

}  // namespace

std::string vega_script(const std::string& path) {
  MT_REQUIRE(
      fs::exists(path), IoError, "Vega '", path,
      "' is missing: install Debian's libjs-vega (scripts/install-deps.sh), or give --vega a folder of "
      "its modules or a one-file vega.min.js");
  if (fs::is_regular_file(path)) return read_text(path);  // a bundle that defines `vega` itself
  std::string js = kPrelude;
  for (const Module& m : modules()) {
    const fs::path file = fs::path(path) / m.file;
    MT_REQUIRE(fs::is_regular_file(file), IoError, "Vega's module ", m.name, " is missing: ", file.string(),
               " (Debian's libjs-vega installs them all)");
    js += "(function () { var module = {exports: {}}, exports = module.exports;\n" + read_text(file) +
          "\n;__vegaModules['" + m.name + "'] = module.exports; })();\n";
  }
  return js + kNamespace;
}

}  // namespace mt::report
