// A report as people and CI systems read it: Markdown (fit for a pull-request comment), one offline
// HTML file with charts (uPlot embedded), and JUnit XML. Each is a function of the report JSON alone.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace fc::report {

// every_cell = false leaves out the per-cell table (the terminal summary).
std::string render_markdown(const nlohmann::json& report, bool every_cell = true);
std::string render_html(const nlohmann::json& report);
std::string render_junit(const nlohmann::json& report);

// Shared by the renderers: "1.23e-04" (3 significant digits) from a report number or "nan"/"inf".
std::string short_num(const nlohmann::json& x);
// The report's title line, e.g. "flashcheck audit: PASS (162 cells: 162 pass)".
std::string title_of(const nlohmann::json& report);

}  // namespace fc::report
