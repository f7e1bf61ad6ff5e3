#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "reports/fuzz_report.hpp"
#include "reports/json_num.hpp"
#include "reports/render.hpp"

namespace fc::report {

using nlohmann::json;

namespace {

// GitHub limits a comment to 65536 characters; the per-cell table stops well before.
constexpr size_t kMaxCellRows = 400;

std::string metric(const json& tensors, const char* tensor, const char* key) {
  if (!tensors.contains(tensor) || !tensors[tensor].contains(key)) return "—";
  return short_num(tensors[tensor][key]["value"]);
}

std::string cell_metric(const json& cell, const char* tensor, const char* key, const char* sub = nullptr) {
  if (!cell.contains("tensors") || !cell["tensors"].contains(tensor)) return "—";
  const json& t = cell["tensors"][tensor];
  if (sub) return t.contains(key) && t[key].contains(sub) ? short_num(t[key][sub]) : "—";
  return t.contains(key) ? short_num(t[key]) : "—";
}

// Worst measured/bound over the three gradients.
std::string grads(const json& tensors) {
  std::string best = "—";
  double worst = -1;
  for (const char* g : {"d_q", "d_k", "d_v"})
    if (tensors.contains(g) && tensors[g].contains("ratio_max")) {
      const double v = to_double(tensors[g]["ratio_max"]["value"], "ratio");
      if (v != v || v > worst) worst = v != v ? INFINITY : v, best = short_num(tensors[g]["ratio_max"]["value"]);
    }
  return best;
}

std::string failure_line(const json& cell) {
  std::string what;
  if (cell["status"] == "error" || cell["status"] == "refused") {
    what = cell.value("error", std::string("error"));
  } else if (cell.contains("tensors")) {
    for (const auto& [name, t] : cell["tensors"].items()) {
      if (t.value("pass", true)) continue;
      what += fmt::format("{}{}: {}", what.empty() ? "" : "; ", name, t.value("why", std::string("fails")));
      if (t.contains("why_element")) what += " at `" + t["why_element"].get<std::string>() + "`";
    }
  }
  std::string line = fmt::format("- **{}** `{}` ({}): {}", cell["kernel"].get<std::string>(),
                                 cell["case"].get<std::string>(), cell["status"].get<std::string>(), what);
  if (cell.contains("replay")) line += fmt::format("<br>replay: `{}`", cell["replay"].get<std::string>());
  return line + "\n";
}

// The accumulation audit's tables: per dtype and regime, one row per kernel, one column per N.
std::string by_n_tables(const json& r) {
  std::map<std::string, json> cases;                        // id -> case
  std::vector<std::pair<std::string, std::string>> groups;  // (dtype, regime) in plan order
  for (const json& c : r["cases"]) {
    cases[c["id"]] = c;
    const std::pair<std::string, std::string> g{c["dtype"], c["regime"]};
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  }
  const std::pair<const char*, const char*> metrics[] = {
      {"rmse", "RMSE of o"}, {"max_scaled", "max scaled error of o"}, {"bias_rel", "bias of o (bias_mag / RMSE)"}};
  std::string md;
  for (const auto& [dtype, regime] : groups) {
    std::vector<int64_t> ns;
    for (const auto& [id, c] : cases)
      if (c["dtype"] == dtype && c["regime"] == regime) ns.push_back(c["n_k"]);
    std::sort(ns.begin(), ns.end());
    ns.erase(std::unique(ns.begin(), ns.end()), ns.end());
    std::vector<std::string> kernels;
    for (const json& cell : r["cells"])
      if (std::find(kernels.begin(), kernels.end(), cell["kernel"].get<std::string>()) == kernels.end()) kernels.push_back(cell["kernel"]);
    for (const auto& [key, title] : metrics) {
      md += fmt::format("\n#### {} {}: {} vs N\n\n| kernel |", dtype, regime, title);
      for (int64_t n : ns) md += fmt::format(" {} |", n);
      md += "\n|---|";
      for (size_t i = 0; i < ns.size(); ++i) md += "--:|";
      md += "\n";
      for (const std::string& k : kernels) {
        md += "| " + k + " |";
        for (int64_t n : ns) {
          std::string v = " |";
          for (const json& cell : r["cells"]) {
            const json& c = cases[cell["case"].get<std::string>()];
            if (cell["kernel"] == k && c["dtype"] == dtype && c["regime"] == regime && c["n_k"] == n)
              v = " " + cell_metric(cell, "o", key) + " |";
          }
          md += v;
        }
        md += "\n";
      }
    }
  }
  return md;
}

// The audit's per-regime table: for each regime (plan order) and kernel, passing cells over cells
// and the worst measured/bound over their tensors; "—" where the kernel has no cell (a variant it
// does not declare).
std::string by_regime_table(const json& r) {
  std::vector<std::string> regimes, kernels;
  std::map<std::string, std::string> regime_of;  // case id -> regime
  for (const json& c : r["cases"]) {
    regime_of[c["id"]] = c["regime"];
    if (std::find(regimes.begin(), regimes.end(), c["regime"].get<std::string>()) == regimes.end()) regimes.push_back(c["regime"]);
  }
  for (const json& cell : r["cells"])
    if (std::find(kernels.begin(), kernels.end(), cell["kernel"].get<std::string>()) == kernels.end()) kernels.push_back(cell["kernel"]);
  std::string md =
      "\n### By regime\n\nPassing cells / cells, and the worst err/bound over every tensor (— : no cell).\n\n| regime "
      "|";
  for (const std::string& k : kernels) md += " " + k + " |";
  md += "\n|---|";
  for (size_t i = 0; i < kernels.size(); ++i) md += "--:|";
  md += "\n";
  for (const std::string& rg : regimes) {
    md += "| " + rg + " |";
    for (const std::string& k : kernels) {
      int64_t cells = 0, pass = 0;
      double worst = -1;
      json worst_v;
      for (const json& cell : r["cells"]) {
        if (cell["kernel"] != k || regime_of[cell["case"].get<std::string>()] != rg) continue;
        ++cells, pass += cell["status"] == "pass";
        if (!cell.contains("tensors")) continue;
        for (const auto& [name, t] : cell["tensors"].items()) {
          if (!t.contains("ratio")) continue;
          const double v = to_double(t["ratio"]["max"], "ratio");
          if (v != v || v > worst) worst = v != v ? INFINITY : v, worst_v = t["ratio"]["max"];
        }
      }
      md += cells == 0 ? " — |" : fmt::format(" {}/{}, {} |", pass, cells, short_num(worst_v));
    }
    md += "\n";
  }
  return md;
}

}  // namespace

std::string render_markdown(const json& r, bool every_cell) {
  if (r.value("kind", "") == "fuzz") return render_fuzz_markdown(r);  // no cells: its own table
  std::string md = fmt::format("## {}\n\n", title_of(r));
  const json& o = r["options"];
  md += fmt::format(
      "Options: `{}`. Every error is against the certified reference; **err/bound** is the measured "
      "error over the a-priori bound (≤ 1 passes).\n\n",
      o.dump());
  md +=
      "| kernel | dtype | cells | pass | fail | o err/bound | o RMSE | lse err/bound | grads err/bound | "
      "o ULP p99 | o bias/RMSE | o vs baseline |\n";
  md += "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
  for (const json& row : r["summary"]) {
    const json& t = row["tensors"];
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                      row["kernel"].get<std::string>(), row["dtype"].get<std::string>(), row["cells"].get<int64_t>(),
                      row["pass"].get<int64_t>(), row["fail"].get<int64_t>() + row["error"].get<int64_t>(),
                      metric(t, "o", "ratio_max"), metric(t, "o", "rmse"), metric(t, "lse", "ratio_max"), grads(t),
                      metric(t, "o", "ulp_p99"), metric(t, "o", "bias_rel"), metric(t, "o", "baseline_ratio"));
  }
  md +=
      "\nColumns are the worst over the row's cells (bias: the largest in magnitude). ULP p99: 99th percentile of "
      "|error| / ulp(reference) in the output type. bias/RMSE: mean sign(ref)·error over the RMSE, in [-1, 1] "
      "(< 0: results shrink toward zero). Baseline: the same-precision 3-pass "
      "`cpu_naive` (max error ratio).\n";
  std::string failures;
  int64_t nfail = 0;
  for (const json& cell : r["cells"])
    if (cell["status"] != "pass" && cell["status"] != "refused") failures += failure_line(cell), ++nfail;
  if (nfail > 0) md += fmt::format("\n### Failures ({})\n\n{}", nfail, failures);
  if (r.contains("skipped") && !r["skipped"].empty()) {
    md += "\n";
    for (const json& s : r["skipped"])
      md += fmt::format("Skipped `{}`: {}.\n", s.value("kernel", std::string()), s.value("reason", std::string()));
  }
  if (r["kind"] == "accumulation") md += "\n### Error and bias vs N\n" + by_n_tables(r);
  if (!every_cell) return md;
  if (r["kind"] == "audit" && !r["cells"].empty()) md += by_regime_table(r);
  md +=
      "\n<details><summary>Every cell</summary>\n\n| case | kernel | status | o err/bound | o RMSE | o max scaled | "
      "lse err/bound | d_q | d_k | d_v | o ULP p99 | o bias/RMSE "
      "|\n|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n";
  size_t rows = 0;
  for (const json& cell : r["cells"]) {
    if (++rows > kMaxCellRows) {
      md += fmt::format("\n{} more cells: see report.json.\n", r["cells"].size() - kMaxCellRows);
      break;
    }
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                      cell["case"].get<std::string>(), cell["kernel"].get<std::string>(),
                      cell["status"].get<std::string>(), cell_metric(cell, "o", "ratio", "max"),
                      cell_metric(cell, "o", "rmse"), cell_metric(cell, "o", "max_scaled"),
                      cell_metric(cell, "lse", "ratio", "max"), cell_metric(cell, "d_q", "ratio", "max"),
                      cell_metric(cell, "d_k", "ratio", "max"), cell_metric(cell, "d_v", "ratio", "max"),
                      cell_metric(cell, "o", "ulp_p99"), cell_metric(cell, "o", "bias_rel"));
  }
  md += "\n</details>\n";
  return md;
}

std::string short_num(const json& x) {
  if (x.is_null()) return "—";
  const double v = to_double(x, "value");
  if (v != v) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (x.is_number_integer()) return fmt::format("{}", x.get<int64_t>());
  return fmt::format("{:.3g}", v);
}

std::string title_of(const json& r) {
  const json& v = r["verdict"];
  const std::string status = v["status"];
  std::string s = fmt::format("flashcheck {}: {} ({} cells: {} pass", r["kind"].get<std::string>(),
                              status == "pass"   ? "PASS"
                              : status == "fail" ? "FAIL"
                                                 : "NOTHING RAN",
                              v["cells"].get<int64_t>(), v["pass"].get<int64_t>());
  if (v["fail"].get<int64_t>()) s += fmt::format(", {} fail", v["fail"].get<int64_t>());
  if (v["error"].get<int64_t>()) s += fmt::format(", {} error", v["error"].get<int64_t>());
  if (v["refused"].get<int64_t>()) s += fmt::format(", {} refused", v["refused"].get<int64_t>());
  if (r.contains("shard"))
    s += fmt::format("; shard {}/{}", r["shard"]["index"].get<int64_t>(), r["shard"]["count"].get<int64_t>());
  return s + ")";
}

}  // namespace fc::report
