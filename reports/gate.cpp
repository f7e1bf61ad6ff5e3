#include "reports/gate.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "reports/json_num.hpp"
#include "reports/render.hpp"
#include "reports/report.hpp"

namespace fc::report {

using nlohmann::json;

namespace {

// Gated metrics: the key in GateOptions and how to read it from a tensor's JSON.
struct Metric {
  const char* name;
  const char* key;
  const char* sub;  // ratio.max etc.
};
const Metric kMetrics[] = {{"rmse", "rmse", nullptr},
                           {"rel_norm", "rel_norm", nullptr},
                           {"max_abs", "max_abs", nullptr},
                           {"max_scaled", "max_scaled", nullptr},
                           {"ratio_max", "ratio", "max"},
                           {"ratio_p99", "ratio", "p99"},
                           {"ulp_p99", "ulp_p99", nullptr},
                           {"bias", "bias_mag", nullptr},
                           {"nonfinite_mismatch", "nonfinite_mismatch", nullptr}};

bool read(const json& t, const Metric& m, double* out) {
  if (!t.contains(m.key)) return false;
  const json& v = m.sub ? t[m.key] : t;
  const char* key = m.sub ? m.sub : m.key;
  if (!v.is_object() || !v.contains(key)) return false;
  *out = to_double(v[key], m.name);
  return true;
}

std::string pct(double old_v, double new_v) {
  if (old_v == 0) return "from 0";
  if (!std::isfinite(new_v) || !std::isfinite(old_v)) return "—";
  return fmt::format("{:+.0f} %", 100 * (new_v / old_v - 1));
}

std::map<std::string, const json*> index_cells(const json& r) {
  std::map<std::string, const json*> m;
  for (const json& c : r["cells"]) m[c["kernel"].get<std::string>() + "\t" + c["case"].get<std::string>()] = &c;
  return m;
}

std::map<std::string, std::string> input_hashes(const json& r) {
  std::map<std::string, std::string> m;
  for (const json& c : r["cases"]) m[c["id"]] = c.value("inputs_hash", std::string());
  return m;
}

// The gate's findings as markdown lines, one list per section.
struct Findings {
  std::string regress, failing, missing, inputs, improved;
};

// Every gated metric of one tensor (bt in the baseline, ct in the current report) of a cell.
void compare_tensor(const std::string& kernel, const std::string& case_id, const std::string& tensor, const json& bt,
                    const json& ct, const GateOptions& o, GateResult& g, Findings& f) {
  for (const Metric& m : kMetrics) {
    double b = 0, c = 0;
    if (!read(bt, m, &b) || !read(ct, m, &c)) continue;
    const bool signed_metric = std::string(m.name) == "bias";
    if (signed_metric) b = std::fabs(b), c = std::fabs(c);
    const double tol = o.tolerance.at(m.name);
    bool worse = (c != c && b == b) || c > b * (1 + tol);
    if (signed_metric) {  // beyond the noise of a mean of count unbiased errors
      double rmse = 0;
      const double count = ct.value("count", 0.0);
      read(ct, kMetrics[0], &rmse);
      worse = worse && count > 0 && c > 3 * rmse / std::sqrt(count);
    }
    const std::string row = fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", kernel, case_id, tensor, m.name,
                                        short_num(m.sub ? bt[m.key][m.sub] : bt[m.key]),
                                        short_num(m.sub ? ct[m.key][m.sub] : ct[m.key]), pct(b, c));
    if (worse) {
      ++g.regressions, f.regress += row;
    } else if (c < b / (1 + tol) || (b != b && c == c)) {
      ++g.improved, f.improved += row;
    }
  }
}

// One cell of the baseline (bc) against the current report's (cc): its status, then its tensors.
void compare_cell(const json& bc, const json& cc, const GateOptions& o, GateResult& g, Findings& f) {
  const std::string kernel = bc["kernel"], case_id = bc["case"];
  if (!cell_failed(bc) && cell_failed(cc)) {
    ++g.new_failures;
    f.failing += fmt::format(
        "- `{}` `{}`: {} → {}{}\n", kernel, case_id, bc["status"].get<std::string>(), cc["status"].get<std::string>(),
        cc.contains("replay") ? fmt::format(" (replay: `{}`)", cc["replay"].get<std::string>()) : "");
  }
  if (!bc.contains("tensors") || !cc.contains("tensors")) return;
  for (const auto& [tensor, bt] : bc["tensors"].items()) {
    if (!cc["tensors"].contains(tensor)) {
      ++g.missing, f.missing += fmt::format("- `{}` `{}` tensor {}\n", kernel, case_id, tensor);
      continue;
    }
    compare_tensor(kernel, case_id, tensor, bt, cc["tensors"][tensor], o, g, f);
  }
}

// The gate's markdown: the verdict and counts, the tolerances, then each non-empty section.
std::string gate_markdown(const GateResult& g, const Findings& f, const GateOptions& o, const std::string& base_name,
                          const std::string& cur_name) {
  std::string md = fmt::format("## flashcheck gate: {}\n\nBaseline `{}`, current `{}`: {} cells compared",
                               g.failed() ? "FAIL" : "PASS", base_name, cur_name, g.compared);
  std::vector<std::string> parts;
  for (const auto& [n, what] : {std::pair{g.regressions, "metric regressions"},
                                {g.new_failures, "cells that no longer pass"},
                                {g.missing, "missing"},
                                {g.inputs_changed, "cells whose inputs changed"},
                                {g.improved, "improvements"},
                                {g.added, "new cells (not gated)"}})
    if (n) parts.push_back(fmt::format("{} {}", n, what));
  md += parts.empty() ? ".\n" : fmt::format("; {}.\n", fmt::join(parts, ", "));
  std::vector<std::string> tol;
  for (const auto& [k, v] : o.tolerance) tol.push_back(fmt::format("{} {:g}", k, v));
  md += fmt::format("\nTolerances (relative growth allowed): {}.\n", fmt::join(tol, ", "));
  const char* head =
      "| kernel | case | tensor | metric | baseline | current | change |\n|---|---|---|---|--:|--:|--:|\n";
  if (!f.failing.empty()) md += "\n### Cells that no longer pass\n\n" + f.failing;
  if (!f.regress.empty()) md += std::string("\n### Metric regressions\n\n") + head + f.regress;
  if (!f.missing.empty()) md += "\n### Missing from the current report\n\n" + f.missing;
  if (!f.inputs.empty()) md += "\n### Inputs changed (the baseline is from other inputs: regenerate it)\n\n" + f.inputs;
  if (!f.improved.empty())
    md += std::string("\n<details><summary>Improvements</summary>\n\n") + head + f.improved + "\n</details>\n";
  return md;
}

}  // namespace

GateOptions default_gate_options() {
  GateOptions o;
  for (const Metric& m : kMetrics) o.tolerance[m.name] = 0.5;
  o.tolerance["rmse"] = o.tolerance["rel_norm"] = 0.1;
  o.tolerance["nonfinite_mismatch"] = 0;
  return o;
}

void apply_tolerance(GateOptions& o, const std::string& spec) {
  const size_t eq = spec.find('=');
  const std::string name = eq == std::string::npos ? "" : spec.substr(0, eq);
  const std::string value = eq == std::string::npos ? spec : spec.substr(eq + 1);
  char* end = nullptr;
  const double x = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != 0 || !(x >= 0) || !std::isfinite(x))
    throw std::invalid_argument(fmt::format("--tolerance {}: expected a number >= 0 or METRIC=NUMBER", spec));
  if (name.empty()) {
    for (auto& [k, v] : o.tolerance)
      if (k != "nonfinite_mismatch") v = x;
    return;
  }
  if (!o.tolerance.count(name)) {
    std::vector<std::string> names;
    for (const Metric& m : kMetrics) names.push_back(m.name);
    throw std::invalid_argument(
        fmt::format("--tolerance {}: unknown metric (one of {})", spec, fmt::join(names, ", ")));
  }
  o.tolerance[name] = x;
}

GateResult gate(const json& base, const json& cur, const GateOptions& o, const std::string& base_name,
                const std::string& cur_name) {
  if (base["kind"] != cur["kind"])
    throw ReportError(fmt::format("gate: {} is a {} report and {} a {} report", base_name,
                                  base["kind"].get<std::string>(), cur_name, cur["kind"].get<std::string>()));
  GateResult g;
  Findings f;
  const auto cur_cells = index_cells(cur), base_cells = index_cells(base);
  const auto base_hash = input_hashes(base), cur_hash = input_hashes(cur);
  for (const auto& [key, bc] : base_cells) {
    const std::string kernel = (*bc)["kernel"], case_id = (*bc)["case"];
    const auto it = cur_cells.find(key);
    if (it == cur_cells.end()) {
      ++g.missing, f.missing += fmt::format("- `{}` `{}`\n", kernel, case_id);
      continue;
    }
    ++g.compared;
    if (base_hash.count(case_id) && cur_hash.count(case_id) && base_hash.at(case_id) != cur_hash.at(case_id)) {
      ++g.inputs_changed,
          f.inputs += fmt::format("- `{}`: {} → {}\n", case_id, base_hash.at(case_id), cur_hash.at(case_id));
      continue;
    }
    compare_cell(*bc, *it->second, o, g, f);
  }
  for (const auto& [key, cc] : cur_cells)
    if (!base_cells.count(key)) ++g.added;
  g.markdown = gate_markdown(g, f, o, base_name, cur_name);
  return g;
}

}  // namespace fc::report
