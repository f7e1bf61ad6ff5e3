// `flashcheck merge`: the shards of one sweep (`--shard i/n`) joined into the report the unsharded
// run writes, byte for byte. Generic over report kinds (docs/report-format.md): every shard must
// carry the same envelope (schema, version, kind, options) and every other field equal, except
// "shard" (each index 0..n-1 exactly once), the arrays of items carrying an integer "seq" (joined
// and ordered by seq, then "sub"), and the derived "summary" / "verdict" (recomputed). A kind that
// keeps other derived fields registers a finalizer in merge.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fc::report {

// ReportError (one line) when the shards do not form one complete sweep.
nlohmann::json merge_reports(const std::vector<nlohmann::json>& shards, const std::vector<std::string>& names);

}  // namespace fc::report
