#include "reports/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "contract/attention.h"
#include "reports/json_num.hpp"

namespace fc::report {

using nlohmann::json;

namespace {

// The dtypes' reading order (the sweep's, then the table's); a name that is no dtype last.
int dtype_rank(const std::string& t) {
  const std::vector<DType> order = dtypes_in_order([](DType) { return true; });
  for (size_t i = 0; i < order.size(); ++i)
    if (t == dtype_name(order[i])) return int(i);
  return int(order.size());
}

// a worse than b for "larger is worse" metrics, NaN worst of all.
bool worse(double a, double b) { return (a != a && b == b) || a > b; }

// Per (kernel, dtype): statuses and the worst of each tensor's metrics with the case it came from.
struct SummaryRow {
  std::string kernel, dtype;
  int64_t cells = 0, pass = 0, fail = 0, error = 0, refused = 0;
  json tensors = json::object();
};

void fold_tensor(json& agg, const json& t, const std::string& case_id) {
  auto get = [&](const char* key) { return t.contains(key) ? t[key] : json(); };  // a report read back may lack one
  auto take_max = [&](const char* key, const json& value) {
    if (value.is_null()) return;
    if (!agg.contains(key) || worse(to_double(value, key), to_double(agg[key]["value"], key)))
      agg[key] = {{"value", value}, {"case", case_id}};
  };
  if (t.contains("ratio") && t["ratio"].is_object() && t["ratio"].contains("max"))
    take_max("ratio_max", t["ratio"]["max"]);
  for (const char* key : {"rmse", "max_scaled", "excess_max", "ulp_p99", "nonfinite_mismatch", "baseline_ratio"})
    take_max(key, get(key));
  // bias: the largest in magnitude, sign kept
  if (!t.contains("bias_rel")) return;
  const double b = to_double(t["bias_rel"], "bias_rel");
  if (!agg.contains("bias_rel") || worse(std::fabs(b), std::fabs(to_double(agg["bias_rel"]["value"], "bias_rel"))))
    agg["bias_rel"] = {{"value", t["bias_rel"]}, {"case", case_id}};
}

// One tensor's metrics as validate() requires them: `bad` throws.
template <class Bad>
void validate_tensor(const json& t, const std::string& tname, const Bad& bad) {
  if (!t.is_object()) bad(fmt::format("tensor \"{}\" is not an object", tname));
  auto numeric = [&](const json& v, const std::string& key) {
    try {
      to_double(v, key.c_str());
    } catch (const std::exception&) {
      bad(fmt::format("tensor \"{}\" has no numeric \"{}\"", tname, key));
    }
  };
  for (const char* key : {"max_abs", "rmse", "max_scaled", "rel_norm", "bias_rel", "ulp_max"})
    numeric(t.contains(key) ? t[key] : json(), key);
  for (const char* key :
       {"count", "nonfinite_mismatch", "excess_max", "excess_p99", "ulp_p99", "bias_mag", "baseline_ratio"})
    if (t.contains(key)) numeric(t[key], key);
  if (t.contains("ratio")) {
    if (!t["ratio"].is_object()) bad(fmt::format("tensor \"{}\": \"ratio\" is not an object", tname));
    for (const char* q : {"max", "p50", "p90", "p99"})
      numeric(t["ratio"].contains(q) ? t["ratio"][q] : json(), std::string("ratio.") + q);
  }
  for (const char* key : {"ratio_hist", "ulp_hist"})
    if (t.contains(key) && (!t[key].is_array() || std::any_of(t[key].begin(), t[key].end(),
                                                              [](const json& x) { return !x.is_number_integer(); })))
      bad(fmt::format("tensor \"{}\": \"{}\" is not an array of integers", tname, key));
  for (const char* key : {"why", "why_element"})
    if (t.contains(key) && !t[key].is_string()) bad(fmt::format("tensor \"{}\": \"{}\" is not a string", tname, key));
  if (t.contains("pass") && !t["pass"].is_boolean())
    bad(fmt::format("tensor \"{}\": \"pass\" is not a boolean", tname));
  if (t.contains("worst") && !t["worst"].is_object())
    bad(fmt::format("tensor \"{}\": \"worst\" is not an object", tname));
}

}  // namespace

json make_report(const std::string& kind, const json& options, json cases, json cells, json skipped) {
  json r = {{"schema", kSchema}, {"version", kSchemaVersion}, {"kind", kind}, {"options", options}};
  r["cases"] = std::move(cases);
  r["cells"] = std::move(cells);
  r["skipped"] = std::move(skipped);
  finalize(r);
  return r;
}

bool cell_failed(const json& cell) {
  const std::string s = cell.value("status", "");
  return s == "fail" || s == "error";
}

void finalize(json& r) {
  std::map<std::string, std::string> dtype_of;
  for (const json& c : r["cases"]) dtype_of[c["id"].get<std::string>()] = c.value("dtype", "");
  std::map<std::tuple<int64_t, int, std::string, std::string>, SummaryRow> rows;
  int64_t counts[4] = {0, 0, 0, 0};  // pass fail error refused
  for (const json& cell : r["cells"]) {
    const std::string kernel = cell["kernel"], case_id = cell["case"], status = cell["status"];
    const std::string dtype = dtype_of.count(case_id) ? dtype_of[case_id] : "";
    SummaryRow& row = rows[{cell.value("sub", int64_t(0)), dtype_rank(dtype), dtype, kernel}];
    row.kernel = kernel, row.dtype = dtype, row.cells++;
    const int k = status == "pass" ? 0 : status == "fail" ? 1 : status == "error" ? 2 : 3;
    (k == 0 ? row.pass : k == 1 ? row.fail : k == 2 ? row.error : row.refused)++;
    counts[k]++;
    if (!cell.contains("tensors")) continue;
    for (const auto& [name, t] : cell["tensors"].items()) fold_tensor(row.tensors[name], t, case_id);
  }
  json summary = json::array();
  for (const auto& [key, row] : rows)
    summary.push_back({{"kernel", row.kernel},
                       {"dtype", row.dtype},
                       {"cells", row.cells},
                       {"pass", row.pass},
                       {"fail", row.fail},
                       {"error", row.error},
                       {"refused", row.refused},
                       {"tensors", row.tensors}});
  r["summary"] = summary;
  const int64_t total = counts[0] + counts[1] + counts[2] + counts[3];
  const char* status = counts[1] + counts[2] > 0 ? "fail" : (counts[0] == 0 ? "empty" : "pass");
  r["verdict"] = {{"status", status},  {"cells", total},     {"pass", counts[0]},
                  {"fail", counts[1]}, {"error", counts[2]}, {"refused", counts[3]}};
}

void validate(const json& r, const std::string& name) {
  auto bad = [&](const std::string& why) {
    throw ReportError(fmt::format("{}: not a flashcheck report: {}", name, why));
  };
  if (!r.is_object()) bad("not a JSON object");
  if (r.value("schema", json()) != kSchema) bad("\"schema\" is not \"flashcheck-report\"");
  if (!r.contains("version") || !r["version"].is_number_integer()) bad("no integer \"version\"");
  if (r["version"].get<int64_t>() != kSchemaVersion)
    throw ReportError(fmt::format("{}: report format version {} (this flashcheck reads version {})", name,
                                  r["version"].get<int64_t>(), kSchemaVersion));
  if (!r.contains("kind") || !r["kind"].is_string()) bad("no \"kind\"");
  if (!r.contains("options") || !r["options"].is_object()) bad("no \"options\" object");
  if (r.contains("shard")) {
    const json& s = r["shard"];
    if (!s.is_object() || !s.contains("index") || !s.contains("count") || !s["index"].is_number_integer() ||
        !s["count"].is_number_integer() || s["count"].get<int64_t>() < 1 || s["index"].get<int64_t>() < 0 ||
        s["index"].get<int64_t>() >= s["count"].get<int64_t>())
      bad("\"shard\" is not {\"index\": i, \"count\": n} with 0 <= i < n");
  }
  if (!r.contains("cells")) return;  // a kind without cells (checked by its own reader)
  if (!r["cells"].is_array() || !r.contains("cases") || !r["cases"].is_array()) bad("\"cases\"/\"cells\" not arrays");
  for (const json& c : r["cases"]) {
    if (!c.is_object() || !c.contains("seq") || !c["seq"].is_number_integer() || !c.contains("id") ||
        !c["id"].is_string())
      bad("a case without integer \"seq\" and string \"id\"");
    for (const char* key : {"dtype", "regime", "inputs_hash"})
      if (c.contains(key) && !c[key].is_string()) bad(fmt::format("a case's \"{}\" is not a string", key));
    for (const char* key : {"n_q", "n_k"})
      if (c.contains(key) && !c[key].is_number_integer()) bad(fmt::format("a case's \"{}\" is not an integer", key));
  }
  if (r.contains("skipped") && !r["skipped"].is_array()) bad("\"skipped\" is not an array");
  for (const json& c : r["cells"]) {
    if (!c.is_object() || !c.contains("seq") || !c["seq"].is_number_integer()) bad("a cell without integer \"seq\"");
    for (const char* key : {"kernel", "case", "status"})
      if (!c.contains(key) || !c[key].is_string()) bad(fmt::format("a cell without string \"{}\"", key));
    const std::string s = c["status"];
    if (s != "pass" && s != "fail" && s != "error" && s != "refused")
      bad("a cell status other than pass|fail|error|refused");
    for (const char* key : {"error", "replay", "device", "config"})
      if (c.contains(key) && !c[key].is_string()) bad(fmt::format("a cell's \"{}\" is not a string", key));
    if (c.contains("sub") && !c["sub"].is_number_integer()) bad("a cell's \"sub\" is not an integer");
    if (!c.contains("tensors")) continue;
    if (!c["tensors"].is_object()) bad("a cell's \"tensors\" is not an object");
    for (const auto& [tname, t] : c["tensors"].items()) validate_tensor(t, tname, bad);
  }
}

json read_report(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw ReportError(fmt::format("{}: cannot read: not a regular file (or absent)", path));
  if (std::filesystem::file_size(path, ec) > (uint64_t(1) << 30))
    throw ReportError(fmt::format("{}: larger than 1 GiB: not a report", path));
  std::ifstream f(path, std::ios::binary);
  std::stringstream bytes;
  if (!f || !(bytes << f.rdbuf())) throw ReportError(fmt::format("{}: cannot read", path));
  json r;
  try {
    r = json::parse(bytes.str());
  } catch (const json::parse_error& e) {
    throw ReportError(fmt::format("{}: not JSON (byte {})", path, e.byte));
  }
  try {
    validate(r, path);
  } catch (const json::exception& e) {
    throw ReportError(fmt::format("{}: malformed report ({})", path, e.what()));
  }
  return r;
}

// dump(2), with arrays of plain numbers on one line (histograms would otherwise take a line per bin).
std::string dump(const json& r) {
  const std::string s = r.dump(2);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (s[i] != '[' || i + 1 >= s.size() || s[i + 1] != '\n') continue;
    const size_t close = s.find(']', i);
    if (close == std::string::npos || s.find_first_of("[{\"", i + 1) < close) continue;
    std::string items;  // the numbers, joined by ", "
    for (size_t j = i + 1; j < close; ++j) {
      if (s[j] == '\n' || s[j] == ' ') continue;
      items += s[j];
      if (s[j] == ',') items += ' ';
    }
    out += items + "]";
    i = close;
  }
  return out + "\n";
}

}  // namespace fc::report
