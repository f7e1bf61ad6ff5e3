// flashcheck gate on hand-made reports: the regressions it must catch, the changes it must let
// through, and the inputs it must refuse.
#include "tests/catch.hpp"

#include "reports/gate.hpp"
#include "reports/tests/report_fixture.hpp"

using namespace fc::report;
using namespace fc::report::testing;
using nlohmann::json;

namespace {
GateResult run(const json& base, const json& cur, GateOptions o = default_gate_options()) {
  return gate(base, cur, o, "base.json", "cur.json");
}
json& o_of(json& r, size_t cell) { return r["cells"][cell]["tensors"]["o"]; }
}  // namespace

TEST_CASE("gate passes identical reports and reports nothing to fix", "[cpu]") {
  const json r = small_report();
  const GateResult g = run(r, r);
  CHECK_FALSE(g.failed());
  CHECK(g.compared == 4);
  CHECK(g.regressions == 0);
  CHECK(g.improved == 0);
  CHECK(g.markdown.find("PASS") != std::string::npos);
}

TEST_CASE("gate catches a metric that grew beyond its tolerance", "[cpu]") {
  const json base = small_report();
  json cur = base;
  o_of(cur, 2)["rmse"] = 1.2e-4;  // +20 % > the 10 % rmse tolerance
  GateResult g = run(base, cur);
  CHECK(g.failed());
  CHECK(g.regressions == 1);
  CHECK(g.markdown.find("| k0 | F16/normal/n64 | o | rmse |") != std::string::npos);
  // ... and lets it through when the stated tolerance allows it.
  GateOptions loose = default_gate_options();
  apply_tolerance(loose, "rmse=0.25");
  CHECK_FALSE(run(base, cur, loose).failed());
  apply_tolerance(loose, "0.1");  // every metric back to 10 %
  CHECK(run(base, cur, loose).failed());
}

TEST_CASE("gate catches growth from an exact zero and a new non-finite mismatch", "[cpu]") {
  json base = small_report();
  o_of(base, 0)["max_abs"] = 0.0;
  json cur = base;
  o_of(cur, 0)["max_abs"] = 1e-30;
  CHECK(run(base, cur).regressions == 1);
  json nan_cur = small_report();
  o_of(nan_cur, 1)["nonfinite_mismatch"] = 1;
  CHECK(run(small_report(), nan_cur).regressions == 1);
  json nan_metric = small_report();
  o_of(nan_metric, 1)["ratio"]["max"] = "nan";
  CHECK(run(small_report(), nan_metric).regressions == 1);
}

TEST_CASE("gate fails a cell that passed and now fails or errors", "[cpu]") {
  const json base = small_report();
  json cur = base;
  cur["cells"][1]["status"] = "fail";
  cur["cells"][3]["status"] = "error";
  cur["cells"][3].erase("tensors");
  const GateResult g = run(base, cur);
  CHECK(g.new_failures == 2);
  CHECK(g.failed());
  CHECK(g.markdown.find("no longer pass") != std::string::npos);
}

TEST_CASE("gate fails a cell or tensor that disappeared, and inputs that changed", "[cpu]") {
  const json base = small_report();
  json cur = base;
  cur["cells"].erase(3);
  CHECK(run(base, cur).missing == 1);
  json with_lse = base;
  with_lse["cells"][0]["tensors"]["lse"] = tensor(1e-5);
  CHECK(run(with_lse, base).missing == 1);  // the current cell has no lse any more
  json other_inputs = base;
  other_inputs["cases"][1]["inputs_hash"] = "00000000000000bb";
  const GateResult g = run(base, other_inputs);
  CHECK(g.inputs_changed == 2);  // both kernels' cells of that case
  CHECK(g.failed());
}

TEST_CASE("gate lets through improvements, growth within tolerance, new cells and bias within noise", "[cpu]") {
  const json base = small_report();
  json cur = base;
  o_of(cur, 0)["rmse"] = 0.5e-4;     // better
  o_of(cur, 1)["max_abs"] = 5.6e-4;  // 4e-4 -> 5.6e-4: +40 % < 50 %
  o_of(cur, 2)["rmse"] = 1.09e-4;    // +9 %
  o_of(cur, 3)["bias_mag"] = -2e-6;  // |bias| from 0, but 3 rmse / sqrt(10000) = 3e-6 is the noise
  cur["cells"].push_back(cell(1, 2, "k2", "F16/normal/n64", 1));  // new: not gated, even failing
  const GateResult g = run(base, cur);
  CHECK_FALSE(g.failed());
  CHECK(g.improved == 1);
  CHECK(g.added == 1);
  // A bias beyond the noise is a regression.
  o_of(cur, 3)["bias_mag"] = -5e-6;
  CHECK(run(base, cur).regressions == 1);
}

TEST_CASE("gate refuses reports of different kinds and bad tolerances", "[cpu]") {
  json other = small_report();
  other["kind"] = "accumulation";
  CHECK_THROWS_AS(run(small_report(), other), ReportError);
  GateOptions o = default_gate_options();
  CHECK_THROWS_AS(apply_tolerance(o, "-1"), std::invalid_argument);
  CHECK_THROWS_AS(apply_tolerance(o, "rmse=x"), std::invalid_argument);
  CHECK_THROWS_AS(apply_tolerance(o, "speed=0.1"), std::invalid_argument);
}
