#include "reports/fuzz_report.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <map>

namespace fc::report {

using nlohmann::json;

void finalize_fuzz_report(json& r) {
  int64_t cases = 0, failures = 0, batches = 0, declined = 0;
  std::map<std::string, int64_t> checks;
  for (const json& b : r["batches"]) {
    ++batches;
    cases += b.value("cases", int64_t(0));
    failures += b.value("failures", int64_t(0));
    declined += b.value("declined", false) ? 1 : 0;
    if (b.contains("checks"))
      for (auto it = b["checks"].begin(); it != b["checks"].end(); ++it) checks[it.key()] += it->get<int64_t>();
  }
  r["summary"] = {{"batches", batches},
                  {"declined_batches", declined},
                  {"cases", cases},
                  {"failures", failures},
                  {"checks", checks}};
  r["verdict"] = {{"status", cases == 0 ? "empty"
                             : failures ? "fail"
                                        : "pass"},
                  {"failures", failures},
                  {"cases", cases}};
}

std::string render_fuzz_markdown(const nlohmann::json& r) {
  const nlohmann::json& s = r["summary"];
  const nlohmann::json& o = r["options"];
  std::string md = fmt::format(
      "## flashcheck fuzz: {} ({} cases, {} failed{})\n\n", r["verdict"]["status"].get<std::string>(),
      s["cases"].get<int64_t>(), s["failures"].get<int64_t>(),
      r.contains("shard")
          ? fmt::format("; shard {}/{}", r["shard"]["index"].get<int64_t>(), r["shard"]["count"].get<int64_t>())
          : "");
  md += fmt::format("Options: `{}`. Batches: {} ({} declined by the kernel). Cases per check: `{}`.\n", o.dump(),
                    s["batches"].get<int64_t>(), s["declined_batches"].get<int64_t>(), s["checks"].dump());
  if (!r["failures"].empty()) {
    md += "\n| batch | case | check | law | message | replay |\n|--:|--:|---|---|---|---|\n";
    for (const nlohmann::json& f : r["failures"])
      md += fmt::format("| {} | {} | {} | {} | {} | `{}` |\n", f["seq"].dump(), f.value("sub", int64_t(0)),
                        f.value("check", ""), f.value("law", ""), f.value("message", ""), f.value("replay", ""));
  }
  return md;
}

}  // namespace fc::report
