// `flashcheck gate --baseline OLD.json --current NEW.json [--tolerance ...]`: prints the Markdown
// diff of two reports of one sweep; exit 1 when a metric regressed beyond its tolerance, a passing
// cell now fails, a cell disappeared or a case's inputs changed; 0 otherwise; 2 on unreadable input
// (docs/gate.md).
#include <fmt/format.h>

#include <memory>

#include "cli/command.hpp"
#include "io/atomic_file.hpp"
#include "reports/gate.hpp"
#include "reports/report.hpp"

namespace fc::cli {

namespace {

struct GateFlags {
  std::string baseline, current, markdown;
  std::vector<std::string> tolerance;
};

int run_gate(const GateFlags& o) {
  report::GateOptions g = report::default_gate_options();
  for (const std::string& t : o.tolerance) {
    try {
      report::apply_tolerance(g, t);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  if (!o.markdown.empty()) io::check_output_path(o.markdown, {o.baseline, o.current});
  report::GateResult r;
  try {
    const nlohmann::json base = report::read_report(o.baseline), cur = report::read_report(o.current);
    r = report::gate(base, cur, g, o.baseline, o.current);
  } catch (const report::ReportError& e) {
    throw UsageError(e.what());
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("gate: malformed report ({})", e.what()));
  }
  fmt::print("{}", r.markdown);
  if (!o.markdown.empty()) io::write_file_atomic(o.markdown, r.markdown);
  return r.failed() ? kExitFail : kExitPass;
}

}  // namespace

Action setup_gate(CLI::App& app) {
  auto* sub = app.add_subcommand("gate", "Fail when a report regressed against a baseline report (docs/gate.md)");
  auto o = std::make_shared<GateFlags>();
  sub->add_option("--baseline", o->baseline, "The baseline report.json")->required();
  sub->add_option("--current", o->current, "The current report.json")->required();
  sub->add_option("--tolerance", o->tolerance,
                  "Relative growth allowed: X for every metric, or METRIC=X (repeatable; docs/gate.md)");
  sub->add_option("--markdown", o->markdown, "Also write the diff to FILE (e.g. for a pull-request comment)");
  return [o] { return run_gate(*o); };
}

}  // namespace fc::cli
