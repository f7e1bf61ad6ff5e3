// The error model (reference/bounds.hpp) on hand-made values: the comparator's exact treatment of
// non-finite values, the FlashAttention rule, and the bound of a problem small enough to check by
// hand. Its tests against real kernels are properties/tests/bounds_kernels_test.cpp.
#include "tests/catch.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "reference/bounds.hpp"

namespace {

using namespace fc;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("within_bound treats non-finite values exactly", "[cpu]") {
  using ref::within_bound;
  CHECK(within_bound({1.0}, {1.0}, {0.0}, DType::F32).ok);
  CHECK(within_bound({1.5}, {1.0}, {0.5}, DType::F32).ok);
  CHECK_FALSE(within_bound({1.5001}, {1.0}, {0.5}, DType::F32).ok);  // just past the bound
  CHECK_FALSE(within_bound({kNaN}, {1.0}, {kInf}, DType::F32).ok);   // NaN is never "within"
  // An infinite bound where the reference is finite proves nothing: it is a failure (of the bound),
  // and never licenses an infinite kernel value.
  CHECK_FALSE(within_bound({1.0}, {1.0}, {kInf}, DType::F32).ok);
  CHECK_FALSE(within_bound({kInf}, {1.0}, {kInf}, DType::F32).ok);
  CHECK(within_bound({kInf}, {3.0e38}, {1.0e38}, DType::F32).ok);  // a finite bound reaching overflow
  CHECK_FALSE(within_bound({1.0}, {1.0}, {kNaN}, DType::F32).ok);  // a NaN bound fails
  CHECK_FALSE(within_bound({1.0}, {kNaN}, {1.0}, DType::F32).ok);  // NaN expected
  CHECK(within_bound({kNaN}, {kNaN}, {0.0}, DType::F32).ok);
  CHECK(within_bound({-kInf}, {-kInf}, {0.0}, DType::F32).ok);       // lse of an empty row
  CHECK_FALSE(within_bound({kInf}, {-kInf}, {0.0}, DType::F32).ok);  // wrong sign
  CHECK_FALSE(within_bound({-3.0e38}, {-kInf}, {0.0}, DType::F32).ok);
  CHECK(within_bound({kInf}, {65000.0}, {600.0}, DType::F16).ok);  // overflow the bound allows
  CHECK_FALSE(within_bound({kInf}, {65000.0}, {1.0}, DType::F16).ok);
  CHECK_FALSE(within_bound({-kInf}, {65000.0}, {600.0}, DType::F16).ok);
  // A bound past the whole range admits an overflow of either sign (the fuzz campaign's F16 d_q at
  // huge scores: reference 9.5e-7, kernel -inf): reference - bound <= -max. The bound must be
  // finite to say so (an infinite one fails above).
  CHECK(within_bound({-kInf}, {9.5e-7}, {65505.0}, DType::F16).ok);
  CHECK(within_bound({kInf}, {-9.5e-7}, {65505.0}, DType::F16).ok);
  CHECK_FALSE(within_bound({-kInf}, {9.5e-7}, {kInf}, DType::F16).ok);
  // A criterion that makes no claim where its tolerance is infinite: anything but NaN passes there.
  CHECK(within_bound({-kInf}, {9.5e-7}, {kInf}, DType::F16, ref::Infinite::NoClaim).ok);
  CHECK(within_bound({3.0}, {1.0}, {kInf}, DType::F32, ref::Infinite::NoClaim).ok);
  CHECK_FALSE(within_bound({kNaN}, {1.0}, {kInf}, DType::F32, ref::Infinite::NoClaim).ok);
  CHECK_FALSE(within_bound({3.0}, {1.0}, {1.0}, DType::F32, ref::Infinite::NoClaim).ok);
  CHECK(within_bound({-kInf}, {1.0}, {65505.0}, DType::F16).ok);
  CHECK_FALSE(within_bound({-kInf}, {1.0}, {65000.0}, DType::F16).ok);
  CHECK_FALSE(within_bound({1.0, 2.0}, {1.0}, {1.0}, DType::F16).ok);  // size mismatch
}

TEST_CASE("within_bound over many chunks: the first failure, and before it the first largest ratio", "[cpu]") {
  // Five chunks of 2^16 elements and a part: ref 1, bound 1, errors below 0.01 but for the planted
  // ones, whose verdicts are written out by hand. Each on 1 thread and on 3.
  const size_t n = 5 * (size_t(1) << 16) + 123;
  std::vector<double> ref_v(n, 1.0), bound(n, 1.0), base(n);
  for (size_t x = 0; x < n; ++x) base[x] = 1.0 + double(x % 97) * 1e-4;
  const auto verdicts = [&](const std::vector<double>& got) {
    std::vector<ref::Verdict> v;
    for (const char* threads : {"1", "3"}) {
      setenv("FC_THREADS", threads, 1);
      v.push_back(ref::within_bound(got, ref_v, bound, DType::F32));
    }
    unsetenv("FC_THREADS");
    return v;
  };
  std::vector<double> tie = base;  // the largest ratio twice: the first one is the worst
  tie[70000] = tie[200000] = 1.875;
  for (const ref::Verdict& v : verdicts(tie)) {
    CHECK(v.ok);
    CHECK(v.worst == 70000);
    CHECK(v.ratio == 0.875);
    CHECK(v.measured == 0.875);
  }
  std::vector<double> nan_at = tie;  // a NaN in chunk 3: the ratio is what came before it, in chunk 1
  nan_at[200000] = base[200000], nan_at[250000] = kNaN, nan_at[260000] = 1.9375;
  for (const ref::Verdict& v : verdicts(nan_at)) {
    CHECK_FALSE(v.ok);
    CHECK(v.worst == 250000);
    CHECK(v.why == "NaN where the reference is finite");
    CHECK(v.ratio == 0.875);
  }
  std::vector<double> exceeds = nan_at;  // an earlier failure, past the bound, in chunk 2
  exceeds[140000] = 3.5;
  for (const ref::Verdict& v : verdicts(exceeds)) {
    CHECK_FALSE(v.ok);
    CHECK(v.worst == 140000);
    CHECK(v.why == "error exceeds the bound");
    CHECK(v.ratio == 2.5);  // its own ratio counts: the scan measured it before it failed
    CHECK(v.measured == 2.5);
  }
  std::vector<double> last = base;  // the last element of the last, short chunk
  last[n - 1] = kInf;
  for (const ref::Verdict& v : verdicts(last)) {
    CHECK_FALSE(v.ok);
    CHECK(v.worst == int64_t(n - 1));
    CHECK(v.why == "infinite where the reference is finite");
  }
}

TEST_CASE("the dtypes' units and floors, read from the dtype table, are IEEE's and bfloat16's", "[cpu]") {
  // Written out by hand (IEEE 754 binary16, binary32, binary64; bfloat16: binary32's exponent, 8 bits).
  struct Units {
    DType t;
    double u, floor, normal;  // unit roundoff, half the smallest subnormal, the smallest normal
  };
  const Units want[] = {{DType::F16, 0x1p-11, 0x1p-25, 0x1p-14},
                        {DType::BF16, 0x1p-8, 0x1p-134, 0x1p-126},
                        {DType::F32, 0x1p-24, 0x1p-150, 0x1p-126},
                        // 2^-1075 is no double: the smallest subnormal stands in (a wider floor)
                        {DType::F64, 0x1p-53, std::numeric_limits<double>::denorm_min(), 0x1p-1022}};
  for (const Units& w : want) {
    INFO(dtype_name(w.t));
    CHECK(ref::unit_roundoff(w.t) == w.u);
    CHECK(ref::underflow_floor(w.t) == w.floor);
    CHECK(ref::min_normal(w.t) == w.normal);
  }
  for (DType t : {DType::I32, DType::BOOL}) {  // index dtypes are never a problem's storage
    CHECK(ref::unit_roundoff(t) == 1);
    CHECK(ref::underflow_floor(t) == 1);
  }
}

TEST_CASE("fa_rule holds within twice the baseline's error and fails beyond", "[cpu]") {
  const std::vector<double> ref_v{1.0, -2.0, 0.5}, err{0, 0, 0};
  const std::vector<double> base{1.01, -2.0, 0.5};  // baseline max error 0.01
  const double noise = 4 * 0x1p-11 * (2.0 + 0.3);
  CHECK(ref::fa_rule({1.0, -2.02, 0.5}, base, ref_v, err, DType::F16).holds);
  CHECK(ref::fa_rule({1.0, -2.02 - noise * 0.99, 0.5}, base, ref_v, err, DType::F16).holds);
  CHECK_FALSE(ref::fa_rule({1.0, -2.02 - noise * 1.01, 0.5}, base, ref_v, err, DType::F16).holds);
  CHECK_FALSE(ref::fa_rule({kNaN, -2.0, 0.5}, base, ref_v, err, DType::F16).holds);
}

TEST_CASE("error bounds of a hand-checked problem", "[cpu]") {
  // One query, two keys, fp16 storage: every term of the model is visible here.
  const Problem p{.n_q = 2, .n_k = 2, .d = 1, .dtype = DType::F16, .mask = Mask::CausalTopLeft, .scale = 1};
  ref::Tensors64 in{{1.0, 0.5}, {1.0, 0.0}, {2.0, -1.0}, {1.0, 1.0}};
  const ref::Certified c = ref::certified(p, in);
  // A CPU FlashAttention kernel: fp32 running sums, one key per tile, P rounded to fp16.
  ref::Precision fp16;
  fp16.storage = DType::F16;
  fp16.ar.s = fp16.ar.pv = fp16.ar.d_o_o = fp16.ar.dp = fp16.ar.dq = fp16.ar.dkv = serial_chain(DType::F32, true);
  fp16.ar.l = serial_chain(DType::F32, true);
  fp16.ar.pv.block = fp16.ar.l.block = 1;
  fp16.ar.pv.merge = fp16.ar.l.merge = Merge::Rescale;
  declare_glibc_libm(fp16.ar);
  fp16.ar.operand = DType::F16;
  const ref::Bounds B = ref::error_bounds(p, in, c, fp16);
  // Row 0 sees one key: its weight is exp(0) = 1 exactly, so P V = v_0 = 2 exactly and the only
  // rounding left is fp32's on the way (6e-8 of 2): it rounds back to 2 in fp16. The bound admits 2
  // and nothing else: one fp16 ulp off (2^-10 below, 2^-9 above) is outside it.
  CHECK(B.o[0] < 0x1p-12);
  CHECK(ref::within_bound({2.0}, {c.value.o[0]}, {B.o[0]}, DType::F16).ok);
  CHECK_FALSE(ref::within_bound({2.0 - 0x1p-10}, {c.value.o[0]}, {B.o[0]}, DType::F16).ok);
  // Row 1 sees both keys (s = 0.5, 0): o = 2 P_0 - P_1 = 0.86738. P_0's weight is exp(0) = 1
  // exactly; P_1 = e^-0.5 / (1 + e^-0.5) is rounded to fp16 before P V: 2^-11 P_1 = 1.84e-4 (the
  // fp32 roundings are 1000x smaller). So the kernel's o before its output rounding lies within
  // about 1.84e-4 of 0.86738, and rounds to fp16 0.8671875 or 0.86767578 (spacing 2^-11 = 4.9e-4):
  // the bound is the distance to the farther, 2.98e-4.
  const double o1 = c.value.o[1], P1 = 1 / (1 + std::exp(0.5));
  CHECK(std::fabs(o1 - (2 * (1 - P1) - P1)) < 1e-12);
  CHECK(B.o[1] == Approx(std::max(1777 * 0x1p-11 - o1, o1 - 1776 * 0x1p-11)).epsilon(1e-9));
  CHECK(B.o[1] < 0x1p-11);  // less than a whole ulp: the P rounding cannot reach a third value
  // bf16 (spacing 2^-8 = 3.9e-3 there): 2^-8 P_1 = 1.5e-3 either side still rounds to 222/256
  // only, so the bound is that value's own distance, and a one-ulp neighbour fails it.
  ref::Precision bf16 = fp16;
  bf16.storage = bf16.ar.operand = DType::BF16;
  const ref::Bounds Bb = ref::error_bounds(p, in, c, bf16);
  CHECK(Bb.o[1] == Approx(std::fabs(222 * 0x1p-8 - o1)).epsilon(1e-9));
  CHECK_FALSE(ref::within_bound({223 * 0x1p-8}, {o1}, {Bb.o[1]}, DType::BF16).ok);
  // Gradients: present, finite, non-negative.
  for (const auto* v : {&B.d_q, &B.d_k, &B.d_v})
    for (double x : *v) CHECK((std::isfinite(x) && x >= 0));
}
