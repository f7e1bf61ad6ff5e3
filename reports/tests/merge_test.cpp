// flashcheck merge on hand-made shards: the join equals the unsharded report, and shards that do not
// form one sweep are refused.
#include "tests/catch.hpp"

#include "reports/merge.hpp"
#include "reports/tests/report_fixture.hpp"

using namespace fc::report;
using namespace fc::report::testing;
using nlohmann::json;

namespace {
// Shard s of 2 of small_report(): case 0 in shard 1, case 1 in shard 0 (a sweep's order need not
// follow the shard's).
json shard(int s) {
  const json whole = small_report();
  json cases = json::array(), cells = json::array();
  const int64_t mine = s == 0 ? 1 : 0;
  for (const json& c : whole["cases"])
    if (c["seq"] == mine) cases.push_back(c);
  for (const json& c : whole["cells"])
    if (c["seq"] == mine) cells.push_back(c);
  json r = make_report("audit", whole["options"], cases, cells, json::array());
  r["shard"] = {{"index", s}, {"count", 2}};
  return r;
}
}  // namespace

TEST_CASE("merge of the shards is the unsharded report, byte for byte", "[cpu]") {
  const json merged = merge_reports({shard(1), shard(0)}, {"b", "a"});
  CHECK(dump(merged) == dump(small_report()));
}

TEST_CASE("merge refuses shards that do not form one sweep", "[cpu]") {
  CHECK_THROWS_AS(merge_reports({shard(0)}, {"a"}), ReportError);                             // a shard missing
  CHECK_THROWS_AS(merge_reports({shard(0), shard(0)}, {"a", "b"}), ReportError);              // one twice
  CHECK_THROWS_AS(merge_reports({small_report(), small_report()}, {"a", "b"}), ReportError);  // not shards
  json other = shard(1);
  other["options"]["seed"] = 2;
  CHECK_THROWS_AS(merge_reports({shard(0), other}, {"a", "b"}), ReportError);  // another sweep
  json three = shard(1);
  three["shard"]["count"] = 3;
  CHECK_THROWS_AS(merge_reports({shard(0), three}, {"a", "b"}), ReportError);
  json dup = shard(1);
  dup["cells"].push_back(shard(0)["cells"][0]);
  CHECK_THROWS_AS(merge_reports({shard(0), dup}, {"a", "b"}), ReportError);  // a cell in two shards
  json unknown = shard(0), unknown1 = shard(1);
  unknown["kind"] = unknown1["kind"] = "mystery";
  CHECK_THROWS_AS(merge_reports({unknown, unknown1}, {"a", "b"}), ReportError);
}

TEST_CASE("a report with a malformed tensor is refused before anything reads it", "[cpu]") {
  const auto refuses = [](json r) { CHECK_THROWS_AS(validate(r, "r.json"), ReportError); };
  json r = small_report();
  CHECK_NOTHROW(validate(r, "r.json"));
  json a = r;
  a["cells"][0]["tensors"]["o"]["ratio"].erase("p99");
  refuses(a);
  json b = r;
  b["cells"][0]["tensors"]["o"]["ratio_hist"] = {1, "x"};
  refuses(b);
  json c = r;
  c["cells"][0]["tensors"]["o"].erase("rmse");
  refuses(c);
  json d = r;
  d["cells"][0]["replay"] = 3;
  refuses(d);
  json e = r;
  e["version"] = 2;
  refuses(e);
  json f = r;
  f["cases"][0]["n_k"] = "64";
  refuses(f);
}
