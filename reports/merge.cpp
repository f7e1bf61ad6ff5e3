#include "reports/merge.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "reports/fuzz_report.hpp"
#include "reports/report.hpp"

namespace fc::report {

using nlohmann::json;

namespace {

// Derived fields recomputed after the join, by kind. Kinds with "cases" and "cells" use finalize();
// a kind of another shape (a fuzz campaign) adds its row here.
using Finalizer = void (*)(json&);
const std::map<std::string, Finalizer> kFinalizers = {
    {"audit", finalize}, {"accumulation", finalize}, {"compare", finalize}, {"fuzz", finalize_fuzz_report}};
const std::set<std::string> kDerived = {"summary", "verdict", "shard"};

// An array whose items all carry an integer "seq": a sharded item list.
bool sharded_array(const json& v) {
  if (!v.is_array()) return false;
  for (const json& x : v)
    if (!x.is_object() || !x.contains("seq") || !x["seq"].is_number_integer()) return false;
  return true;
}

}  // namespace

json merge_reports(const std::vector<json>& shards, const std::vector<std::string>& names) {
  if (shards.empty()) throw ReportError("merge: no report given");
  const json& first = shards[0];
  const std::string kind = first["kind"];
  const auto fin = kFinalizers.find(kind);
  if (fin == kFinalizers.end())
    throw ReportError(fmt::format("merge: {}: no merge rule for reports of kind \"{}\"", names[0], kind));
  if (!first.contains("shard"))
    throw ReportError(fmt::format("merge: {} is not a shard (no \"shard\": run with --shard i/n)", names[0]));
  const int64_t count = first["shard"]["count"];
  if (int64_t(shards.size()) != count)
    throw ReportError(fmt::format("merge: {} shards given, the sweep has {}", shards.size(), count));
  std::vector<int> seen(size_t(count), -1);
  json merged = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const json& r = shards[s];
    if (!r.contains("shard")) throw ReportError(fmt::format("merge: {} is not a shard (no \"shard\")", names[s]));
    if (r["shard"]["count"] != count)
      throw ReportError(fmt::format("merge: {} is shard {}/{}, not of {} shards", names[s],
                                    r["shard"]["index"].get<int64_t>(), r["shard"]["count"].get<int64_t>(), count));
    const int64_t i = r["shard"]["index"];
    if (seen[size_t(i)] >= 0)
      throw ReportError(fmt::format("merge: {} and {} are both shard {}", names[size_t(seen[size_t(i)])], names[s], i));
    seen[size_t(i)] = int(s);
    for (const auto& [key, value] : r.items()) {
      if (kDerived.count(key)) continue;
      if (sharded_array(value) && (s == 0 || merged.contains(key))) {
        if (!merged.contains(key)) merged[key] = json::array();
        for (const json& x : value) merged[key].push_back(x);
        continue;
      }
      if (s == 0) {
        merged[key] = value;
      } else if (!merged.contains(key) || merged[key] != value) {
        throw ReportError(
            fmt::format("merge: {} and {} differ in \"{}\": not shards of one sweep", names[0], names[s], key));
      }
    }
    for (const auto& [key, value] : merged.items())
      if (!r.contains(key))
        throw ReportError(fmt::format("merge: {} has no \"{}\": not shards of one sweep", names[s], key));
  }
  for (auto& [key, value] : merged.items()) {
    if (!value.is_array() || !sharded_array(value)) continue;
    std::stable_sort(value.begin(), value.end(), [](const json& a, const json& b) {
      const int64_t sa = a["seq"], sb = b["seq"];
      return sa != sb ? sa < sb : a.value("sub", int64_t(0)) < b.value("sub", int64_t(0));
    });
    for (size_t x = 1; x < value.size(); ++x)
      if (value[x]["seq"] == value[x - 1]["seq"] &&
          value[x].value("sub", int64_t(0)) == value[x - 1].value("sub", int64_t(0)))
        throw ReportError(
            fmt::format("merge: \"{}\" item seq {} appears in two shards", key, value[x]["seq"].get<int64_t>()));
  }
  fin->second(merged);
  return merged;
}

}  // namespace fc::report
