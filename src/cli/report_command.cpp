// meshtrain report: the page. Vega's library and every chart's spec and data
// are inlined, so the file opens offline and fetches nothing.
#include <cctype>
#include <cstdio>
#include <set>

#include "cli/commands.h"
#include "cli/report.h"
#include "core/error.h"
#include "core/file.h"

namespace mt {

namespace {

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// JSON inside <script>: "</" would end the element early; "<\/" means the
// same in a JSON string (the only place it can occur).
std::string json_in_script(std::string s) {
  for (size_t at = s.find("</"); at != std::string::npos; at = s.find("</", at + 3))
    s.replace(at, 2, "<\\/");
  return s;
}

// Library code cannot be rewritten that way ("</" may sit in a regular
// expression): it is inlined as it is, refused if it could end the element.
const std::string& code_in_script(const std::string& js) {
  std::string lower = js;
  for (char& c : lower)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  MT_REQUIRE(lower.find("</script") == std::string::npos && lower.find("<!--") == std::string::npos,
             DataError,
             "Vega's code holds '</script' or '<!--' and cannot be inlined into the page as it is");
  return js;
}

const char* kStyle = R"(body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:17px;margin:28px 0 4px}p.note{color:#555;font-size:13px;margin:0 0 6px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
.chart{min-height:40px}#errors{color:#b00})";

// Chart i draws into <div id="chart-i">; a failure is written into #errors
// (and to the console), so that an empty chart never passes silently.
const char* kDraw = R"(const errors = document.getElementById('errors');
function fail(what) { console.error(what); errors.textContent += what + '\n'; }
window.addEventListener('error', e => fail('error: ' + e.message));
specs.forEach((spec, i) => {
  try {
    new vega.View(vega.parse(spec), {renderer: 'svg', container: '#chart-' + i, hover: true})
      .runAsync().catch(e => fail('chart ' + i + ': ' + e));
  } catch (e) { fail('chart ' + i + ': ' + e); }
});)";

std::string run_table(const std::vector<report::Run>& runs, const std::vector<std::string>& paths) {
  std::string t = "<table><tr><th>run</th><th>file</th><th>layout</th><th>steps</th><th>last loss</th></tr>";
  for (size_t i = 0; i < runs.size(); ++i) {
    const report::Run& r = runs[i];
    std::string layout = "(no header line)";
    if (r.header.is_object()) {
      const nlohmann::json& p = r.header["config"]["parallel"];
      layout = "dp " + p["dp"].dump() + ", tp " + p["tp"].dump() + ", pp " + p["pp"].dump() + ", cp " +
               p["cp"].dump() + ", zero " + p["zero"].dump() + " on " + r.header["world_size"].dump() +
               " rank(s)";
    }
    t += "<tr><td>" + escape_html(r.name) + "</td><td>" + escape_html(paths[i]) + "</td><td>" + layout +
         "</td><td>" + std::to_string(r.steps.size()) + "</td><td>" + r.steps.back()["loss"].dump() +
         "</td></tr>";
  }
  return t + "</table>";
}

}  // namespace

int run_report_command(const ReportArgs& args) {
  MT_REQUIRE(!args.runs.empty() || !args.plans.empty(), ConfigError,
             "report needs at least one metrics file or --plan file");
  const std::string vega = report::vega_script(args.vega);
  std::vector<report::Run> runs;
  std::set<std::string> names;
  for (const std::string& path : args.runs) {
    runs.push_back(report::read_run(path));
    std::string& name = runs.back().name;
    for (int k = 2; names.count(name) > 0; ++k)
      name = runs.back().name + " (" + std::to_string(k) + ")";
    names.insert(name);
  }
  std::vector<report::Plan> plans;
  for (const std::string& path : args.plans)
    plans.push_back(report::read_plan(path));
  const std::vector<report::Chart> charts = report::make_charts(runs, plans);
  nlohmann::json specs = nlohmann::json::array();
  std::string body;
  for (size_t i = 0; i < charts.size(); ++i) {
    specs.push_back(charts[i].spec);
    body += "<h2>" + escape_html(charts[i].title) + "</h2>\n<p class=\"note\">" +
            escape_html(charts[i].note) + "</p>\n<div class=\"chart\" id=\"chart-" + std::to_string(i) +
            "\"></div>\n";
  }
  std::string html =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>meshtrain report</title>\n<style>" +
      std::string(kStyle) + "</style>\n<script>" + code_in_script(vega) +
      "</script>\n</head><body>\n<h1>meshtrain report</h1>\n" + run_table(runs, args.runs) +
      "\n<pre id=\"errors\"></pre>\n" + body + "<script>\nconst specs = " + json_in_script(specs.dump()) +
      ";\n" + kDraw + "\n</script>\n</body></html>\n";
  AtomicFile f(args.out);
  f.write(html.data(), html.size());
  f.commit();
  std::printf("report of %zu run(s), %zu charts: %s\n", runs.size(), charts.size(), args.out.c_str());
  return 0;
}

}  // namespace mt
