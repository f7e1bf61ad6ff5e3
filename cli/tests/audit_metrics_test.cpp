// The audit's comparator held to planted errors: it must see them at their exact size, keep NaN,
// and count exact agreement (including -inf == -inf for empty rows) as zero.
#include "tests/catch.hpp"
#include <cmath>
#include <limits>

#include "cli/audit_sweep.hpp"

using namespace fc;
using namespace fc::cli;

namespace {

// A reference and a kernel output for a (1, 1, 2, 2) problem whose second row is empty.
struct Fixture {
  Problem p{1, 1, 1, 2, 2, 2, DType::F64, Mask::None, 1.0};
  ref::Certified want;
  Outputs got;
  Fixture() {
    const double inf = std::numeric_limits<double>::infinity();
    want.value.o = {0.5, -0.25, 0, 0};  // (1, 1, 2, 2)
    want.value.lse = {1.5, -inf};       // (1, 1, 2)
    want.o_mag = {2, 4, 0, 0};          // sum_j P_ij |v_jk|; empty row: 0
    want.value.d_q = {3, 4, 0, 0};      // (1, 1, 2, 2): norm 5
    want.value.d_k = {1, 0, 0, 0};      // (1, 1, 2, 2)
    want.value.d_v = {0, 0, 0, 2};      // (1, 1, 2, 2)
    got.o = HostTensor::from_f64(DType::F64, shape_q(p), want.value.o);
    got.lse = HostTensor::from_f64(DType::F64, shape_lse(p), want.value.lse);
    got.d_q = HostTensor::from_f64(DType::F64, shape_q(p), want.value.d_q);
    got.d_k = HostTensor::from_f64(DType::F64, shape_kv(p), want.value.d_k);
    got.d_v = HostTensor::from_f64(DType::F64, shape_kv(p), want.value.d_v);
  }
};

}  // namespace

TEST_CASE("audit measure is zero on an exact match, empty rows included", "[cpu]") {
  Fixture f;
  const Errors e = measure(f.got, f.want);
  CHECK(e.o == 0);
  CHECK(e.lse == 0);  // -inf vs -inf
  CHECK(e.grad == 0);
  CHECK(e.has_grad);
}

TEST_CASE("audit measure reports planted errors at their scaled size", "[cpu]") {
  Fixture f;
  f.got.o.set(1, -0.25 + 0.5);    // |Δo| = 0.5 over o_mag 4
  f.got.lse.set(0, 1.5 - 0.125);  // |Δlse| = 0.125
  f.got.d_q.set(0, 3 + 0.5);      // ||Δ|| / ||d_q|| = 0.5 / 5
  const Errors e = measure(f.got, f.want);
  CHECK(e.o == 0.125);
  CHECK(e.lse == 0.125);
  CHECK(e.grad == 0.1);
}

TEST_CASE("audit measure turns non-finite disagreement into inf or NaN, never 0", "[cpu]") {
  Fixture f;
  f.got.o.set(2, 1e-300);  // an empty row must give exactly 0: any value over o_mag 0 is infinite
  CHECK(std::isinf(measure(f.got, f.want).o));
  Fixture g;
  g.got.lse.set(1, 0.0);  // empty row's lse must be -inf
  CHECK(std::isinf(measure(g.got, g.want).lse));
  Fixture h;
  h.got.o.set(0, std::nan(""));
  h.got.d_v.set(3, std::nan(""));
  const Errors e = measure(h.got, h.want);
  CHECK(std::isnan(e.o));
  CHECK(std::isnan(e.grad));
  CHECK(std::isnan(worst(worst(0.0, e.o), 1.0)));  // worst() keeps NaN in any argument order
  CHECK(std::isnan(worst(1.0, worst(e.o, 0.0))));
}
