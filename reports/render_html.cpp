#include <fmt/format.h>

#include <algorithm>

#include "reports/metrics.hpp"
#include "reports/render.hpp"

namespace fc::report {

namespace embedded {
extern const char uplot_js[], uplot_css[], report_js[], report_css[];  // embedded.cpp (embed.cmake)
}

using nlohmann::json;

namespace {

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// What the charts need, small enough to embed: cases by id, and per cell the plotted metrics.
json chart_data(const json& r) {
  json cases = json::object(), regimes = json::array();  // regimes: in plan order
  for (const json& c : r["cases"]) {
    const std::string regime = c.value("regime", "");
    if (std::find(regimes.begin(), regimes.end(), regime) == regimes.end()) regimes.push_back(regime);
    cases[c["id"].get<std::string>()] = {{"regime", c.value("regime", "")},
                                         {"dtype", c.value("dtype", "")},
                                         {"n_q", c.value("n_q", 0)},
                                         {"n_k", c.value("n_k", 0)},
                                         {"score_max", c.value("score_max", json())}};
  }
  json cells = json::array();
  for (const json& cell : r["cells"]) {
    json one = {{"kernel", cell["kernel"]}, {"case", cell["case"]}, {"status", cell["status"]}};
    if (cell.contains("tensors")) {
      json t = json::object();
      for (const auto& [name, m] : cell["tensors"].items()) {
        json s = json::object();
        for (const char* key : {"rmse", "max_scaled", "bias", "bias_rel", "ratio_hist", "ulp_hist"})
          if (m.contains(key)) s[key] = m[key];
        if (m.contains("ratio")) s["ratio_max"] = m["ratio"]["max"];
        t[name] = s;
      }
      one["t"] = t;
    }
    cells.push_back(one);
  }
  json labels = json::array({"0", "1", "2"});
  for (int b = 3; b < kUlpBins - 1; ++b) labels.push_back(fmt::format("≤2^{}", b - 1));
  labels.push_back(fmt::format(">2^{}", kUlpBins - 3));
  return {{"kind", r["kind"]},          {"cases", cases},       {"cells", cells},
          {"ratio_edges", kRatioEdges}, {"ulp_labels", labels}, {"regimes", regimes}};
}

// JSON inside <script>: "</" would end the element early; "<\/" is the same JSON string.
std::string script_safe(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/') out += '\\';
  }
  return out;
}

std::string summary_table(const json& r) {
  std::string h =
      "<table><tr><th class=l>kernel</th><th class=l>dtype</th><th>cells</th><th>pass</th><th>fail</th>"
      "<th>o err/bound</th><th>o RMSE</th><th>lse err/bound</th><th>d_q</th><th>d_k</th><th>d_v</th>"
      "<th>o ULP p99</th><th>o bias/RMSE</th><th>o vs baseline</th></tr>\n";
  auto m = [](const json& t, const char* tensor, const char* key) {
    return t.contains(tensor) && t[tensor].contains(key) ? short_num(t[tensor][key]["value"]) : std::string("—");
  };
  for (const json& row : r["summary"]) {
    const json& t = row["tensors"];
    const int64_t bad = row["fail"].get<int64_t>() + row["error"].get<int64_t>();
    h += fmt::format(
        "<tr{}><td class=l>{}</td><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        bad ? " class=fail" : "", esc(row["kernel"]), esc(row["dtype"]), row["cells"].get<int64_t>(),
        row["pass"].get<int64_t>(), bad, m(t, "o", "ratio_max"), m(t, "o", "rmse"), m(t, "lse", "ratio_max"),
        m(t, "d_q", "ratio_max"), m(t, "d_k", "ratio_max"), m(t, "d_v", "ratio_max"), m(t, "o", "ulp_p99"),
        m(t, "o", "bias_rel"), m(t, "o", "baseline_ratio"));
  }
  return h + "</table>\n";
}

std::string failures(const json& r) {
  std::string h;
  for (const json& cell : r["cells"]) {
    const std::string st = cell["status"];
    if (st == "pass" || st == "refused") continue;
    std::string what = cell.value("error", std::string());
    if (cell.contains("tensors"))
      for (const auto& [name, t] : cell["tensors"].items())
        if (!t.value("pass", true))
          what += fmt::format("{}{}: {} {}", what.empty() ? "" : "; ", name, t.value("why", std::string()),
                              t.value("why_element", std::string()));
    h += fmt::format("<li><b>{}</b> <code>{}</code> ({}): {}", esc(cell["kernel"]), esc(cell["case"]), esc(st),
                     esc(what));
    if (cell.contains("replay")) h += fmt::format("<br>replay: <code>{}</code>", esc(cell["replay"]));
    h += "</li>\n";
  }
  return h.empty() ? "" : "<h2 class=fail>Failures</h2><ul>\n" + h + "</ul>\n";
}

}  // namespace

std::string render_html(const json& r) {
  const std::string title = title_of(r);
  const bool pass = r["verdict"]["status"] == "pass";
  std::string h = "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>" + esc(title) + "</title>\n<style>";
  h += embedded::uplot_css;
  h += embedded::report_css;
  h += "</style></head><body>\n";
  h += fmt::format("<h1 class={}>{}</h1>\n", pass ? "pass" : "fail", esc(title));
  h += fmt::format(
      "<p class=note>Options: <code>{}</code>. Errors are against the certified reference; err/bound "
      "is the measured error over the a-priori bound (≤ 1 passes).</p>\n",
      esc(r["options"].dump()));
  h += summary_table(r) + failures(r);
  h += "<div id=fc-charts></div>\n<script>";
  h += embedded::uplot_js;
  h += "</script>\n<script id=fc-data type=\"application/json\">" + script_safe(chart_data(r).dump()) + "</script>\n";
  h += "<script>";
  h += embedded::report_js;
  h += "</script>\n</body></html>\n";
  return h;
}

}  // namespace fc::report
