// `flashcheck merge --out DIR SHARD.json...`: the reports of `--shard i/n` runs joined into the report
// the unsharded run writes (byte for byte), with its Markdown, HTML and JUnit. Any report kind whose
// shards share the envelope (docs/report-format.md). Exit as the merged verdict (0 pass, 1 fail);
// 2 when the shards are unreadable or do not form one sweep.
#include <fmt/format.h>

#include <memory>

#include "cli/command.hpp"
#include "reports/merge.hpp"
#include "reports/output.hpp"
#include "reports/render.hpp"
#include "reports/report.hpp"

namespace fc::cli {

namespace {

struct MergeOptions {
  std::vector<std::string> shards;
  std::string out = "reports/out", junit;
  bool as_json = false;
};

int run_merge(const MergeOptions& o) {
  report::check_output_paths(o.out, o.junit, o.shards);
  std::vector<nlohmann::json> shards;
  nlohmann::json r;
  try {
    for (const std::string& s : o.shards) shards.push_back(report::read_report(s));
    r = report::merge_reports(shards, o.shards);
  } catch (const report::ReportError& e) {
    throw UsageError(e.what());
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("merge: malformed report ({})", e.what()));
  }
  report::RunInfo info;
  info.command = fmt::format("flashcheck merge ({} shards)", shards.size());
  const std::vector<std::string> wrote = report::write_outputs(o.out, o.junit, r, info, o.shards);
  if (o.as_json) {
    fmt::print("{}", report::dump(r));
  } else {
    fmt::print("{}", report::render_markdown(r, false));
    if (!wrote.empty()) fmt::print("\nwrote {}\n", fmt::join(wrote, ", "));
  }
  const std::string status = r.contains("verdict") ? r["verdict"].value("status", "pass") : "pass";
  return status == "fail" ? kExitFail : kExitPass;
}

}  // namespace

Action setup_merge(CLI::App& app) {
  auto* sub = app.add_subcommand("merge", "Join the reports of --shard i/n runs into the unsharded report");
  auto o = std::make_shared<MergeOptions>();
  sub->add_option("shards", o->shards, "Every shard's report.json")->required();
  sub->add_option("--out", o->out, "Folder for the merged report (default reports/out)");
  sub->add_option("--junit", o->junit, "Also write JUnit XML to FILE");
  sub->add_flag("--json", o->as_json, "Print the merged report.json instead of the summary");
  return [o] { return run_merge(*o); };
}

}  // namespace fc::cli
