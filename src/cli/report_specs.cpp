// The two Vega chart shapes of the report (Vega 5 grammar: data, scales,
// axes, legends, marks). Rendered as SVG; each mark carries a tooltip.
#include "cli/report.h"

namespace mt::report {

namespace {
using json = nlohmann::json;

json base(const json& rows, const json& transform) {
  json data = {{"name", "t"}, {"values", rows}};
  if (!transform.is_null()) data["transform"] = transform;
  return {{"$schema", "https://vega.github.io/schema/vega/v5.json"},
          {"width", 520},
          {"height", 220},
          {"padding", 5},
          {"autosize", {{"type", "fit-x"}, {"contains", "padding"}}},
          {"data", json::array({data})}};
}
}  // namespace

json line_spec(const json& rows, const std::string& x_title, const std::string& y_title) {
  json s = base(rows, nullptr);
  s["autosize"] = "pad";
  s["scales"] = json::array({{{"name", "x"},
                              {"type", "linear"},
                              {"domain", {{"data", "t"}, {"field", "x"}}},
                              {"range", "width"},
                              {"zero", false},
                              {"nice", true}},
                             {{"name", "y"},
                              {"type", "linear"},
                              {"domain", {{"data", "t"}, {"field", "y"}}},
                              {"range", "height"},
                              {"zero", false},
                              {"nice", true}},
                             {{"name", "c"},
                              {"type", "ordinal"},
                              {"domain", {{"data", "t"}, {"field", "s"}}},
                              {"range", "category"}}});
  s["axes"] = json::array({{{"orient", "bottom"}, {"scale", "x"}, {"title", x_title}},
                           {{"orient", "left"}, {"scale", "y"}, {"title", y_title}, {"grid", true}}});
  s["legends"] = json::array({{{"stroke", "c"}, {"symbolType", "stroke"}}});
  const json xy = {{"x", {{"scale", "x"}, {"field", "x"}}},
                   {"y", {{"scale", "y"}, {"field", "y"}}},
                   {"stroke", {{"scale", "c"}, {"field", "s"}}}};
  json line = {{"type", "line"}, {"from", {{"data", "f"}}}, {"encode", {{"enter", xy}}}};
  line["encode"]["enter"]["strokeWidth"] = {{"value", 2}};
  json dots = {{"type", "symbol"}, {"from", {{"data", "f"}}}, {"encode", {{"enter", xy}}}};
  dots["encode"]["enter"]["size"] = {{"value", 18}};
  dots["encode"]["enter"]["fill"] = {{"scale", "c"}, {"field", "s"}};
  dots["encode"]["enter"]["tooltip"] = {{"signal", "datum"}};
  s["marks"] = json::array({{{"type", "group"},
                             {"from", {{"facet", {{"name", "f"}, {"data", "t"}, {"groupby", "s"}}}}},
                             {"marks", json::array({line, dots})}}});
  return s;
}

json stacked_spec(const json& rows, const std::string& y_title) {
  const json stack = json::array(
      {{{"type", "stack"}, {"groupby", json::array({"c"})}, {"field", "v"}, {"sort", {{"field", "p"}}}}});
  json s = base(rows, stack);
  s["autosize"] = "pad";
  s["scales"] = json::array({{{"name", "x"},
                              {"type", "band"},
                              {"domain", {{"data", "t"}, {"field", "c"}}},
                              {"range", "width"},
                              {"padding", 0.2}},
                             {{"name", "y"},
                              {"type", "linear"},
                              {"domain", {{"data", "t"}, {"field", "y1"}}},
                              {"range", "height"},
                              {"nice", true},
                              {"zero", true}},
                             {{"name", "c"},
                              {"type", "ordinal"},
                              {"domain", {{"data", "t"}, {"field", "p"}}},
                              {"range", "category"}}});
  s["axes"] = json::array({{{"orient", "bottom"},
                            {"scale", "x"},
                            {"labelAngle", -30},
                            {"labelAlign", "right"},
                            {"labelLimit", 200}},
                           {{"orient", "left"}, {"scale", "y"}, {"title", y_title}, {"grid", true}}});
  s["legends"] = json::array({{{"fill", "c"}}});
  const json enter = {{"x", {{"scale", "x"}, {"field", "c"}}},    {"width", {{"scale", "x"}, {"band", 1}}},
                      {"y", {{"scale", "y"}, {"field", "y0"}}},   {"y2", {{"scale", "y"}, {"field", "y1"}}},
                      {"fill", {{"scale", "c"}, {"field", "p"}}}, {"tooltip", {{"signal", "datum"}}}};
  s["marks"] = json::array({{{"type", "rect"}, {"from", {{"data", "t"}}}, {"encode", {{"enter", enter}}}}});
  return s;
}

}  // namespace mt::report
