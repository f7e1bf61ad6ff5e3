// `flashcheck render REPORT.json --out DIR`: a report's Markdown and HTML (DIR/report.md, report.html)
// from its report.json alone, as the run that wrote it rendered them. Committed results keep the JSON
// and the Markdown; this writes the HTML page (results/README.md). Exit 0; 2 when the report is
// unreadable or DIR unusable.
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "cli/command.hpp"
#include "io/atomic_file.hpp"
#include "reports/render.hpp"
#include "reports/report.hpp"

namespace fc::cli {

namespace {

struct RenderOptions {
  std::string report, out;
};

int run_render(const RenderOptions& o) {
  nlohmann::json r;
  try {
    r = report::read_report(o.report);
  } catch (const report::ReportError& e) {
    throw UsageError(e.what());
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (!std::filesystem::is_directory(o.out, ec))
    throw UsageError(fmt::format("{}: cannot create the output folder", o.out));
  std::vector<std::pair<std::string, std::string>> files = {{"report.md", report::render_markdown(r)}};
  if (r.value("kind", "") != "fuzz") files.emplace_back("report.html", report::render_html(r));  // cells only
  for (const auto& [name, bytes] : files) {
    const std::string path = (std::filesystem::path(o.out) / name).string();
    io::write_file_atomic(path, bytes, {o.report});
    fmt::print("wrote {}\n", path);
  }
  return kExitPass;
}

}  // namespace

Action setup_render(CLI::App& app) {
  auto* sub = app.add_subcommand("render", "Write a report's report.md and report.html from its report.json");
  auto o = std::make_shared<RenderOptions>();
  sub->add_option("report", o->report, "The report.json")->required();
  sub->add_option("--out", o->out, "Folder for report.md and report.html")->required();
  return [o] { return run_render(*o); };
}

}  // namespace fc::cli
