// The low-precision emulation is bit-exact: storage rounding (cvt) agrees with the contract's
// independent round_to on every fp16 value and every midpoint; P is rounded to storage before P·V
// (a case where rounding P or not gives different bits); fp16 accumulation differs from fp32.
#include "tests/catch.hpp"
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/scalar.hpp"
#include "kernels/tests/test_util.hpp"

namespace {

using namespace fc;
using fc::cpu::cvt;

float float_of_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Every float whose 13 low mantissa bits are 0, 0x1000 (a midpoint between fp16 neighbours), or
// one bit either side of that midpoint, over all exponents: covers fp16 normals, subnormals,
// overflow and every tie.
template <class F>
void for_fp16_grid(F&& f) {
  for (uint32_t hi = 0; hi < (1u << 19); ++hi)
    for (uint32_t lo : {0x0000u, 0x0FFFu, 0x1000u, 0x1001u}) f(float_of_bits((hi << 13) | lo));
}

}  // namespace

TEST_CASE("cvt to fp16 and bf16 rounds chosen values to nearest-even", "[cpu]") {
  using half = Eigen::half;
  using bf16 = Eigen::bfloat16;
  const double u16 = std::ldexp(1.0, -11), ub = std::ldexp(1.0, -8);
  CHECK(double(cvt<float>(cvt<half>(1.0f + float(u16)))) == 1.0);                // tie -> even
  CHECK(double(cvt<float>(cvt<half>(1.0f + 3 * float(u16)))) == 1.0 + 4 * u16);  // tie -> even
  CHECK(double(cvt<float>(cvt<half>(65519.0f))) == 65504.0);
  CHECK(std::isinf(double(cvt<float>(cvt<half>(65520.0f)))));          // rounds past max
  CHECK(double(cvt<float>(cvt<half>(std::ldexp(1.0f, -25)))) == 0.0);  // tie -> 0
  CHECK(double(cvt<float>(cvt<half>(std::ldexp(1.5f, -25)))) == std::ldexp(1.0, -24));
  CHECK(double(cvt<float>(cvt<bf16>(1.0f + float(ub)))) == 1.0);
  CHECK(double(cvt<float>(cvt<bf16>(1.0f + 3 * float(ub)))) == 1.0 + 4 * ub);
  // From double, one rounding: 1 + 2^-11 + 2^-40 lies above the tie, so it rounds up; through
  // float (which drops 2^-40) it would land on the tie and round down to 1.
  CHECK(double(cvt<float>(cvt<half>(1.0 + u16 + std::ldexp(1.0, -40)))) == 1.0 + 2 * u16);
  CHECK(double(cvt<float>(cvt<half>(float(1.0 + u16 + std::ldexp(1.0, -40))))) == 1.0);
}

TEST_CASE("cvt to fp16 agrees with round_to on every fp16 value and midpoint", "[cpu]") {
  int64_t checked = 0, mismatched = 0;
  for_fp16_grid([&](float x) {
    const double got = double(cvt<float>(cvt<Eigen::half>(x)));
    const double want = round_to(DType::F16, double(x));
    const bool same = (got == want) || (std::isnan(got) && std::isnan(want));
    mismatched += !same;
    ++checked;
  });
  CHECK(checked == 4 * (int64_t(1) << 19));
  CHECK(mismatched == 0);
}

TEST_CASE("cvt to bf16 agrees with round_to on every bf16 midpoint", "[cpu]") {
  int64_t mismatched = 0;
  for (uint32_t hi = 0; hi < (1u << 16); ++hi)
    for (uint32_t lo : {0x0000u, 0x7FFFu, 0x8000u, 0x8001u}) {
      const float x = float_of_bits((hi << 16) | lo);
      const double got = double(cvt<float>(cvt<Eigen::bfloat16>(x)));
      const double want = round_to(DType::BF16, double(x));
      mismatched += !((got == want) || (std::isnan(got) && std::isnan(want)));
    }
  CHECK(mismatched == 0);
}

TEST_CASE("fp16 multiply-add rounds once per step", "[cpu]") {
  using half = Eigen::half;
  const half one(1.0f), tiny(std::ldexp(1.0f, -11));         // tiny = half an fp16 ulp of 1
  CHECK(float(fc::cpu::mac<half>(one, tiny, one)) == 1.0f);  // 1 + 2^-11 is a tie: stays 1
  CHECK(fc::cpu::mac<float>(1.0f, std::ldexp(1.0f, -11), 1.0f) == 1.0f + std::ldexp(1.0f, -11));
}

// Two keys: s_0 = 0 (the max, P = 1, v = +1) and s_1 = -c with P_1 = exp(-c) = 1 - delta,
// delta = 3/4 of the storage ulp u below 1 (v = -1). Rounded to storage, P_1 becomes 1 - u, so
// o = (1 - P_1)/l = u / (2 - delta); unrounded, o = delta / (2 - delta).
TEST_CASE("forward rounds P to storage before P·V", "[cpu]") {
  for (DType t : {DType::F16, DType::BF16}) {
    const double u = t == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const double delta = 0.75 * u;
    const Problem p{
        .n_q = 1,
        .n_k = 2,
        .d = 1,
        .dtype = t,
        .scale = -std::log1p(-delta)  // s_1 = scale * q·k_1 = -scale
    };
    const Inputs in = test::make_inputs(p, {1.0}, {0.0, -1.0}, {1.0, -1.0});
    const double rounded = round_to(t, u / (2 - delta));
    const double unrounded = round_to(t, delta / (2 - delta));
    REQUIRE(rounded != unrounded);  // the case distinguishes the two
    INFO(dtype_name(t));
    Outputs out;
    out.o = HostTensor(t, shape_q(p));               // (1,1,1,1)
    out.lse = HostTensor(DType::F32, shape_lse(p));  // (1,1,1)
    const HostTensor& o = out.o;
    cpu::Tiling tiling;
    cpu::tiled_forward(in, tiling, DType::F32, out);
    CHECK(o.get(0) == rounded);
    tiling.p_operand = cpu::POperand::Accum;  // the same algorithm keeping P in fp32
    cpu::tiled_forward(in, tiling, DType::F32, out);
    CHECK(o.get(0) != rounded);
    CHECK(std::fabs(o.get(0) - unrounded) < std::fabs(o.get(0) - rounded));
    for (const char* name : {"cpu_tiled", "cpu_naive"}) {  // both registered kernels round P
      INFO(name);
      CHECK(test::run(*find_kernel(name), in, Config{}).o.get(0) == rounded);
    }
  }
}

// q = (1,1,1), k = (1, 2^-11, 2^-11): in fp32 q·k = 1 + 2^-10; accumulating in fp16 in index
// order (cpu_tiled's documented order), each 1 + 2^-11 is a tie that rounds back to 1, so q·k = 1.
// With one key, lse = s exactly.
TEST_CASE("forward with fp16 accumulation differs from fp32 accumulation", "[cpu]") {
  const Problem p{.n_q = 1, .n_k = 1, .d = 3, .dtype = DType::F16, .scale = 1.0};
  const double t = std::ldexp(1.0, -11);
  const Inputs in = test::make_inputs(p, {1, 1, 1}, {1, t, t}, {1, 1, 1});
  Config f32, f16;
  f16.accum = DType::F16;
  const Kernel& tiled = *find_kernel("cpu_tiled");
  CHECK(test::run(tiled, in, f32).lse.get(0) == 1.0 + 2 * t);
  CHECK(test::run(tiled, in, f16).lse.get(0) == 1.0);

  // cpu_naive accumulates through Eigen products, whose summation order is Eigen's: on a random
  // d = 64 problem the fp16-accumulated answer differs from the fp32 one somewhere, and the fp32
  // one is the closer of the two to the fp64-accumulated answer.
  Problem r;
  r.n_q = r.n_k = r.d = 64;
  r.dtype = DType::F16;
  r.scale = default_scale(r.d);
  const Inputs big = test::random_inputs(r, 7);
  for (const char* name : {"cpu_tiled", "cpu_naive"}) {
    INFO(name);
    const Kernel& kern = *find_kernel(name);
    Config f64;
    f64.accum = DType::F64;
    const auto o32 = test::run(kern, big, f32).o.to_f64(), o16 = test::run(kern, big, f16).o.to_f64();
    const auto o64 = test::run(kern, big, f64).o.to_f64();
    CHECK(o32 != o16);
    CHECK(test::normwise_error(o32, o64) < test::normwise_error(o16, o64));
  }
}
