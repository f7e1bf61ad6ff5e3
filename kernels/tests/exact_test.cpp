// cpu_tiled with fp64 storage equals the exact oracle (256-bit MPFR) for every tile shape up to
// the problem size and both loop orders, on random problems with GQA, n_q != n_k, all three masks
// and fully masked rows; cpu_naive likewise. The target, 1e-12, is the tiled emulation's stated accuracy: relative to
// Σ_j P_ij |v_jk| for o (exact itself, run on |v|), absolute for lse, normwise for gradients.
#include "tests/catch.hpp"
#include <cmath>
#include <string>

#include "kernels/tests/exact_expected.hpp"
#include "kernels/tests/test_util.hpp"
#include "reference/exact.hpp"

namespace {

using namespace fc;
using test::Expected;
using test::expected_of;
using test::worst_error;

constexpr double kTarget = 1e-12;  // cpu_tiled (fp64 storage) vs exact

struct ExactShape {
  int32_t batch, heads_q, heads_kv, n_q, n_k, d;
  Mask mask;
  double scale;  // 0: default 1/sqrt(d)
};

const ExactShape kShapes[] = {
    {1, 1, 1, 5, 5, 3, Mask::None, 0},
    {2, 4, 2, 3, 7, 2, Mask::CausalTopLeft, 0},
    {1, 3, 1, 7, 4, 4, Mask::CausalBottomRight, 0},  // rows 0..2 see no key
    {1, 2, 2, 6, 3, 5, Mask::CausalTopLeft, 0},
    {1, 2, 1, 4, 9, 3, Mask::CausalBottomRight, 0},
    {1, 2, 1, 6, 6, 2, Mask::None, 3.0},  // wider score range
    {1, 1, 1, 1, 1, 1, Mask::None, 0},
};

Problem problem_of(const ExactShape& s, DType t) {
  Problem p{s.batch, s.heads_q, s.heads_kv, s.n_q, s.n_k, s.d, t, s.mask, s.scale};
  if (s.scale == 0) p.scale = default_scale(s.d);
  return p;
}

}  // namespace

TEST_CASE("forward and backward of cpu_tiled in fp64 equal the exact oracle for every tile shape", "[cpu]") {
  const Kernel& tiled = *find_kernel("cpu_tiled");
  uint64_t seed = 100;
  for (const ExactShape& s : kShapes) {
    const Problem p = problem_of(s, DType::F64);
    const Inputs in = test::random_inputs(p, ++seed);
    const Expected e = expected_of(in);
    int runs = 0;
    for (LoopOrder order : {LoopOrder::FA2, LoopOrder::FA1})
      for (int32_t bm = 1; bm <= p.n_q; ++bm)
        for (int32_t bn = 1; bn <= p.n_k; ++bn) {
          INFO("shape " << (&s - kShapes) << " tile " << bm << "x" << bn
                        << (order == LoopOrder::FA1 ? " FA1" : " FA2"));
          CHECK(worst_error(test::run(tiled, in, test::tile_config(bm, bn, order), DType::F64), e) <= kTarget);
          ++runs;
        }
    CHECK(runs == 2 * p.n_q * p.n_k);
    INFO("shape " << (&s - kShapes) << " default 64x64");
    CHECK(worst_error(test::run(tiled, in, Config{}, DType::F64), e) <= kTarget);
  }
}

TEST_CASE("forward and backward of cpu_naive in fp64 equal the exact oracle", "[cpu]") {
  const Kernel& naive = *find_kernel("cpu_naive");
  uint64_t seed = 100;
  for (const ExactShape& s : kShapes) {
    const Problem p = problem_of(s, DType::F64);
    const Inputs in = test::random_inputs(p, ++seed);
    INFO("shape " << (&s - kShapes));
    CHECK(worst_error(test::run(naive, in, Config{}, DType::F64), expected_of(in)) <= kTarget);
  }
}

// Control: the same comparison rejects fp32 storage (errors near 1e-7), so it is not vacuous.
TEST_CASE("forward and backward of cpu_tiled in fp32 miss the fp64 target", "[cpu]") {
  const Kernel& tiled = *find_kernel("cpu_tiled");
  for (const ExactShape& s : {kShapes[0], kShapes[2]}) {
    const Problem p = problem_of(s, DType::F32);
    const Inputs in = test::random_inputs(p, 7);  // exact sees the same fp32-rounded inputs
    const Outputs out = test::run(tiled, in, test::tile_config(2, 2, LoopOrder::FA2), DType::F64);
    const Expected e = expected_of(in);
    CHECK(test::scaled_error(out.o.to_f64(), e.r.o, e.o_mag) > kTarget);
    CHECK(test::normwise_error(out.d_q.to_f64(), e.r.d_q) > kTarget);
    CHECK(std::isfinite(worst_error(out, e)));
  }
}
