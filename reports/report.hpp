// The report document (docs/report-format.md): one JSON object, versioned, whose content is a
// function of the options and seed alone (run metadata lives in run.json beside it). Every kind of
// report — audit, accumulation, compare, and any sharded campaign (fuzz) — shares the envelope:
//   {"schema": "flashcheck-report", "version": 1, "kind": K, "options": {...},
//    ["shard": {"index": i, "count": n},] <arrays of items carrying "seq">, ...,
//    "summary": ..., "verdict": {...}}
// so that `flashcheck merge` can join the shards of any kind.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fc::report {

inline constexpr const char* kSchema = "flashcheck-report";
inline constexpr int kSchemaVersion = 1;

// A report that cannot be used (not JSON, wrong schema or version, missing fields): exit 2.
struct ReportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The envelope with its items; finalize() adds summary and verdict.
nlohmann::json make_report(const std::string& kind, const nlohmann::json& options, nlohmann::json cases,
                           nlohmann::json cells, nlohmann::json skipped);

// Recomputes "summary" (per kernel and dtype: cells by status, and per tensor the worst measured /
// bound, RMSE, scaled error, ULP excess, bias and baseline ratio, each with the case it came from) and
// "verdict" from the cells. A kind-specific step of the same function for every cell-based kind.
void finalize(nlohmann::json& report);

// Structure check of a report read back (gate, merge): envelope, and cases/cells of the right types.
// `name` prefixes the message.
void validate(const nlohmann::json& report, const std::string& name);
// Read, parse and validate; ReportError (one line naming the file) on any problem.
nlohmann::json read_report(const std::string& path);

// The bytes flashcheck writes for a report (2-space indent, newline-terminated).
std::string dump(const nlohmann::json& report);

// Does a cell count against the verdict? fail and error do; pass and refused do not.
bool cell_failed(const nlohmann::json& cell);

}  // namespace fc::report
