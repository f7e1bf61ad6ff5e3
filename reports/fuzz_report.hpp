// The fuzz campaign's report format (docs/fuzzing.md): its derived fields and its Markdown. The
// campaign (fuzz/campaign.cpp) writes reports in it, `flashcheck merge` joins their shards and
// recomputes the derived fields, and `render` prints them; the format lives here, with the other
// report kinds, so that reports/ needs nothing of fuzz/.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace fc::report {

// The report's derived fields from its items ("batches"): "summary" (totals) and "verdict".
void finalize_fuzz_report(nlohmann::json& report);

// The report as Markdown (`flashcheck merge` writes it as report.md for a fuzz report).
std::string render_fuzz_markdown(const nlohmann::json& report);

}  // namespace fc::report
