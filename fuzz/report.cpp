#include <fmt/format.h>

#include "fuzz/campaign.hpp"

namespace fc::fuzz {

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

}  // namespace fc::fuzz
