// A refused cell is told from an errored one by the exception's type (fc::Refusal, kernels/registry.hpp),
// never by its text: a kernel that throws Refusal gives a "refused" cell, one that throws anything
// else an "error" cell, even when its message says "unsupported".
#include <stdexcept>

#include "reports/plan.hpp"
#include "reports/run.hpp"
#include "reports/subject.hpp"
#include "tests/catch.hpp"
#include "verdict/verdict.hpp"

using namespace fc;
using namespace fc::report;

namespace {

// cpu_naive's row with a forward that throws `thrown`.
Kernel throwing_kernel(std::function<void()> thrown) {
  const Kernel* naive = find_kernel("cpu_naive");
  REQUIRE(naive);
  Kernel k = *naive;
  k.info.name = "throwing";
  k.forward = [thrown](const Inputs&, const Config&, Outputs&) { thrown(); };
  k.backward = nullptr;
  k.info.backward = false;
  return k;
}

std::string status_of(const Kernel& k) {
  CaseSpec c;
  REQUIRE(find_case("F32/normal/n64", &c));
  const Inputs full = make_inputs(c, 1), checked = checked_inputs(c, full);
  const ref::Tensors64 checked64 = verdict::tensors64(checked);
  const ref::Certified want = verdict::certify(checked, checked64);
  const Subject s = subject_of(k, Config{});
  REQUIRE(s.claims(c));
  const CellRun r = run_cell(c, full, checked, &checked64, want, s);
  CAPTURE(r.cell.dump());
  return r.cell["status"].get<std::string>();
}

}  // namespace

TEST_CASE("a kernel's Refusal is a refused cell, and any other exception an errored one", "[cpu]") {
  const Kernel refusing = throwing_kernel([] { throw Refusal("this tile does not fit the shape"); });
  CHECK(status_of(refusing) == "refused");
  const Kernel erring = throwing_kernel([] { throw std::invalid_argument("unsupported problem, tile or device"); });
  CHECK(status_of(erring) == "error");
  const Kernel failing = throwing_kernel([] { throw std::runtime_error("a launch failed"); });
  CHECK(status_of(failing) == "error");
}

TEST_CASE("execute carries a Refusal as Run::refused", "[cpu]") {
  CaseSpec c;
  REQUIRE(find_case("F32/normal/n64", &c));
  const Inputs in = checked_inputs(c, make_inputs(c, 1));
  const verdict::Run refused = verdict::execute(throwing_kernel([] { throw Refusal("no"); }), in, Config{}, false);
  CHECK(refused.refused);
  CHECK(!refused.error.empty());
  const verdict::Run errored =
      verdict::execute(throwing_kernel([] { throw std::invalid_argument("unsupported"); }), in, Config{}, false);
  CHECK(!errored.refused);
  CHECK(!errored.error.empty());
}
