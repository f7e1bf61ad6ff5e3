// The audit's long cases (N > 4096, GPU kernels): the plan's shapes, and a cut cell judged as the
// sweep judges a GPU kernel's: the subject runs the whole problem, its last rows' o, lse and d_q (and
// under a causal mask d_k and d_v of the keys only those rows see) are held against the reference and
// bound of those rows alone. Negative controls: an error planted in a held element of any tensor fails
// the cell on that tensor alone; one in an earlier row, or in the d_k, d_v of a key earlier rows also
// see, is out of the cell's reach by design.
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "reference/gpu/oracle_select.hpp"
#include "reports/cell.hpp"
#include "reports/plan.hpp"
#include "reports/run.hpp"
#include "reports/subject.hpp"
#include "tests/catch.hpp"
#include "verdict/verdict.hpp"

using namespace fc;
using namespace fc::report;

TEST_CASE("the GPU plan's long cases: N to 131072, the last 1024 rows, forward and backward", "[cpu]") {
  PlanOptions o;
  o.gpu = true;
  o.dtypes = {DType::F16};
  std::set<std::string> ids;
  for (const CaseSpec& c : audit_plan(o)) {
    if (!c.gpu_only || c.regime == "gqa") continue;
    CAPTURE(c.id);
    ids.insert(c.id);
    CHECK(c.rows == 1024);
    CHECK(c.backward);
    const Problem p = checked_problem(c);
    CHECK(p.n_q == 1024);
    CHECK(p.n_k == c.p.n_k);
    CHECK(checked_keys(c) == (c.p.mask == Mask::None ? 0 : 1024));
    CaseSpec found;
    REQUIRE(find_case(c.id, &found));
    CHECK(found.rows == c.rows);
  }
  CHECK(ids == std::set<std::string>{"F16/normal/n16384", "F16/normal/n32768", "F16/normal/n65536",
                                     "F16/normal/n131072", "F16/outliers/n16384", "F16/outliers/n131072",
                                     "F16/causal_bottom_right/n16384", "F16/causal_bottom_right/n131072"});
  o.gpu = false;  // a CPU sweep has none
  for (const CaseSpec& c : audit_plan(o)) CHECK_FALSE(c.gpu_only);
}

TEST_CASE("long cases stay cut where the CPU checks them; a whole one runs no baseline", "[cpu]") {
  PlanOptions o;
  o.gpu = true;
  o.dtypes = {DType::BF16};
  std::vector<CaseSpec> cases;
  for (const CaseSpec& c : audit_plan(o))
    if (c.gpu_only && is_cut(c)) cases.push_back(c);
  REQUIRE(cases.size() == 8);
  const Kernel* k = find_kernel("cpu_tiled");
  REQUIRE(k);
  Subject s = subject_of(*k, Config{});
  s.claims = [](const CaseSpec&) { return true; };
  // Under --oracle cpu (and on a machine without a GPU under auto) the bound is the CPU's: every long
  // case keeps its last 1024 rows.
  ref::set_oracle(ref::OracleKind::Cpu);
  std::vector<CaseSpec> after = cases;
  whole_long_rows(after, {s});
  ref::set_oracle(ref::OracleKind::Auto);
  for (size_t i = 0; i < cases.size(); ++i) CHECK(after[i].rows == kLongRows);
  // A long case checked on every row runs no baseline, and its JSON says so.
  CaseSpec whole = cases.back();
  whole.rows = 0;
  CHECK_FALSE(is_cut(whole));
  CHECK_FALSE(baseline_runs(whole));
  CHECK(baseline_runs(cases.back()));
  CHECK(case_json(whole, 0, 0.0).contains("baseline"));
  CHECK(case_json(whole, 0, 0.0)["rows_checked"] == whole.p.n_q);
  CHECK_FALSE(case_json(cases.back(), 0, 0.0).contains("baseline"));  // a cut case's baseline runs its rows
  CaseSpec small = cases.back();
  small.gpu_only = false, small.rows = 0;
  CHECK(baseline_runs(small));
}

namespace {

// A cut case of the long cases' kind on a size a test can run in full: 512 keys, the last 96 rows.
CaseSpec cut_case(Mask mask) {
  CaseSpec c;
  c.id = "F16/normal/n16384";  // any id: it seeds the inputs
  c.regime = "normal";
  c.p = Problem{1, 1, 1, 512, 512, 64, DType::F16, mask, default_scale(64)};
  c.backward = true;
  c.rows = 96;
  return c;
}

// The subject of cpu_tiled run on the whole problem (as a GPU kernel is), with `plant` applied to
// its full outputs.
Subject full_problem_subject(std::function<void(Outputs&)> plant) {
  const Kernel* k = find_kernel("cpu_tiled");
  REQUIRE(k);
  Subject s = subject_of(*k, Config{});
  s.cut_rows = false;
  auto run = s.run;
  s.run = [run, plant](const Inputs& in, bool backward) {
    Outputs out = run(in, backward);
    plant(out);
    return out;
  };
  return s;
}

// Moves element i of t by `ulps` of its own value (fp16 storage: 2^-10 relative per ulp).
void nudge(HostTensor& t, int64_t i, double ulps) {
  const double x = t.get(i);
  t.set(i, x + ulps * std::ldexp(1.0, std::ilogb(x == 0 ? 1.0 : x) - 10));
}

}  // namespace

// A percent of the largest |x| among x's elements [from, numel) added to its last element: the
// gradients' bounds are of the tensor's scale.
void plant_last(HostTensor& x, int64_t from) {
  double big = 0;
  for (int64_t i = from; i < x.numel(); ++i) big = std::max(big, std::fabs(x.get(i)));
  const int64_t last = x.numel() - 1;
  x.set(last, x.get(last) + 0.01 * big);
}

TEST_CASE("a cut cell holds the last rows' o, lse, d_q and, under a causal mask, the last keys' d_k, d_v", "[cpu]") {
  for (Mask mask : {Mask::None, Mask::CausalBottomRight}) {
    CAPTURE(int(mask));
    const bool causal = mask != Mask::None;
    const CaseSpec c = cut_case(mask);
    const Inputs full = make_inputs(c, 3), checked = checked_inputs(c, full);
    const ref::Tensors64 checked64 = verdict::tensors64(checked);
    const ref::Certified want = verdict::certify(checked, checked64);
    // The first checked element of o and d_q; of d_k and d_v (the keys the checked rows alone see).
    const int64_t d = c.p.d, first = int64_t(c.p.n_q - c.rows) * d, first_key = int64_t(c.p.n_k - c.rows) * d;
    auto cell = [&](std::function<void(Outputs&)> plant) {
      return run_cell(c, full, checked, &checked64, want, full_problem_subject(plant));
    };

    const CellRun ok = cell([](Outputs&) {});
    CAPTURE(ok.cell.dump());
    CHECK(ok.cell["status"] == "pass");
    std::set<std::string> held;
    for (const auto& [name, m] : ok.metrics) {
      held.insert(name);
      CHECK(m.count == (name == "lse" ? c.rows : c.rows * d));
    }
    CHECK(held ==
          (causal ? std::set<std::string>{"o", "lse", "d_q", "d_k", "d_v"} : std::set<std::string>{"o", "lse", "d_q"}));

    // Planted errors in checked rows (and keys) fail the cell, each on its own tensor.
    std::vector<std::pair<std::string, std::function<void(Outputs&)>>> caught = {
        {"o", [&](Outputs& out) { nudge(out.o, first + 5 * d + 3, 64); }},
        {"lse", [&](Outputs& out) { out.lse.set(c.p.n_q - 1, out.lse.get(c.p.n_q - 1) + 1e-3); }},
        {"d_q", [&](Outputs& out) { plant_last(out.d_q, first); }},
    };
    if (causal) {
      caught.push_back({"d_k", [&](Outputs& out) { plant_last(out.d_k, first_key); }});
      caught.push_back({"d_v", [&](Outputs& out) { plant_last(out.d_v, first_key); }});
    }
    for (const auto& [tensor, plant] : caught) {
      CAPTURE(tensor);
      const CellRun bad = cell(plant);
      CHECK(bad.cell["status"] == "fail");
      for (const auto& [name, m] : bad.metrics) CHECK(m.pass == (name != tensor));
    }
    // Out of reach: a row before the checked ones; d_k, d_v of a key earlier rows see too.
    CHECK(cell([&](Outputs& out) { nudge(out.d_q, first - 1, 1e4); }).cell["status"] == "pass");
    CHECK(cell([&](Outputs& out) {
            nudge(out.d_k, first_key - 1, 1e4);
            nudge(out.d_v, 9, 1e4);
          }).cell["status"] == "pass");
  }
}
