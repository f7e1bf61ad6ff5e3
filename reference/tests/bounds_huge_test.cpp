// The error model at the ends of fp64's range: v and d_o scaled by 2^a and 2^b (up to 1e150 each, so
// dP and dS near 1e300 while every exact output is finite). Scaling by powers of two is exact, so the
// exact outputs scale exactly and the bounds must too: finite, sound against the exact oracle, as
// sharp as at unit magnitudes, and an output moved just past its bound still fails.
#include "tests/catch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "reference/bounds.hpp"
#include "reference/exact.hpp"
#include "contract/tensor.hpp"

namespace fc::ref {
namespace {

// q, k small integers (exact scores), v, d_o ~ N(0, 1) times 2^a, 2^b.
Tensors64 inputs(const Problem& p, int a, int b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-4, 4);
  std::normal_distribution<double> normal(0.0, 1.0);
  Tensors64 in;
  for (int64_t x = 0; x < numel_q(p); ++x) in.q.push_back(small(rng));
  for (int64_t x = 0; x < numel_kv(p); ++x) in.k.push_back(small(rng));
  for (int64_t x = 0; x < numel_kv(p); ++x) in.v.push_back(std::ldexp(normal(rng), a));
  for (int64_t x = 0; x < numel_q(p); ++x) in.d_o.push_back(std::ldexp(normal(rng), b));
  return in;
}

// A CPU FlashAttention kernel in fp64: serial round-to-nearest sums, one key per tile, glibc's exp.
Precision fp64_kernel() {
  Precision pr;
  pr.storage = DType::F64;
  pr.ar.soft = pr.ar.operand = DType::F64;
  pr.ar.s = pr.ar.pv = pr.ar.l = pr.ar.d_o_o = pr.ar.dp = pr.ar.dq = pr.ar.dkv = serial_chain(DType::F64, true);
  pr.ar.pv.block = pr.ar.l.block = 1;
  pr.ar.pv.merge = pr.ar.l.merge = Merge::Rescale;
  declare_glibc_libm(pr.ar);
  return pr;
}

struct HugeTensor {
  const char* name;
  const std::vector<double>*value, *err, *bound, *exact, *unit_bound;
  int shift;  // the power of two it scales by
};

}  // namespace

TEST_CASE("error bounds stay finite, sound and sharp at dS ~ 1e300", "[cpu]") {
  const Problem p{.heads_q = 2,
                  .heads_kv = 1,
                  .n_q = 8,
                  .n_k = 40,
                  .d = 11,
                  .dtype = DType::F64,
                  .mask = Mask::CausalBottomRight,
                  .scale = -0x1p-13};
  // The fuzz campaign's two findings (v 1e143, d_o 1e46; v 1e110, d_o 1e122), and both near 2^500.
  const int shifts[][2] = {{476, 153}, {366, 405}, {498, 498}};
  for (const Precision& prec : {fp64_kernel(), Precision{DType::F64, undeclared_arithmetic(DType::F64)}}) {
    const Tensors64 unit = inputs(p, 0, 0, 5);
    const Certified c1 = certified(p, unit);
    const Bounds B1 = error_bounds(p, unit, c1, prec);
    for (const auto& s : shifts) {
      const int a = s[0], b = s[1];
      INFO("v x 2^" << a << ", d_o x 2^" << b);
      const Tensors64 in = inputs(p, a, b, 5);
      const Certified c = certified(p, in);
      const Result64 ex = exact(p, in, 160);
      const Bounds B = error_bounds(p, in, c, prec);
      const HugeTensor ts[] = {{"o", &c.value.o, &c.err.o, &B.o, &ex.o, &B1.o, a},
                               {"d_q", &c.value.d_q, &c.err.d_q, &B.d_q, &ex.d_q, &B1.d_q, a + b},
                               {"d_k", &c.value.d_k, &c.err.d_k, &B.d_k, &ex.d_k, &B1.d_k, a + b},
                               {"d_v", &c.value.d_v, &c.err.d_v, &B.d_v, &ex.d_v, &B1.d_v, b}};
      for (const HugeTensor& t : ts) {
        INFO(t.name);
        REQUIRE(t.value->size() == t.exact->size());
        for (size_t x = 0; x < t.value->size(); ++x) {
          INFO(x << ": exact " << (*t.exact)[x] << ", reference " << (*t.value)[x] << " +- " << (*t.err)[x]
                 << ", bound " << (*t.bound)[x]);
          REQUIRE(std::isfinite((*t.exact)[x]));
          // The certified reference's own error and the kernel's bound: finite and sound.
          REQUIRE(std::isfinite((*t.err)[x]));
          REQUIRE(std::isfinite((*t.bound)[x]));
          CHECK(std::fabs((*t.exact)[x] - (*t.value)[x]) <= (*t.err)[x]);
          // As sharp as at unit magnitudes: the same bound scaled by 2^shift (the underflow floors,
          // the only terms that do not scale, are below 2^-900 of it there).
          CHECK((*t.bound)[x] == Approx(std::ldexp((*t.unit_bound)[x], t.shift)).epsilon(1e-9));
        }
        // The exact outputs rounded to fp64 (an ideal kernel) pass; moved past the bound, fail.
        CHECK(within_bound(*t.exact, *t.value, *t.bound, DType::F64).ok);
        for (const double side : {1.5, -1.5}) {
          std::vector<double> moved = *t.value;
          moved[3] += side * (*t.bound)[3];
          CHECK_FALSE(within_bound(moved, *t.value, *t.bound, DType::F64).ok);
        }
      }
    }
  }
}

TEST_CASE("an infinite reference error gives an infinite bound, never a NaN one", "[cpu]") {
  // fp64's scale constant is exact (its relative error 0): 0 times the reference's +inf error is no
  // error, not NaN. The +inf bound that remains is a failure of its own (within_bound, Fails).
  const Problem p{.n_q = 3, .n_k = 5, .d = 4, .dtype = DType::F64, .scale = 0.5};
  const Tensors64 in = inputs(p, 0, 0, 9);
  Certified c = certified(p, in);
  c.err.d_q[1] = c.err.d_k[2] = std::numeric_limits<double>::infinity();
  for (const Precision& prec : {fp64_kernel(), Precision{DType::F64, undeclared_arithmetic(DType::F64)}}) {
    const Bounds B = error_bounds(p, in, c, prec);
    CHECK(B.d_q[1] == std::numeric_limits<double>::infinity());
    CHECK(B.d_k[2] == std::numeric_limits<double>::infinity());
    const Verdict v = within_bound(c.value.d_q, c.value.d_q, B.d_q, DType::F64);
    CHECK_FALSE(v.ok);
    CHECK(v.why == "infinite bound where the reference is finite");
  }
}

TEST_CASE("zero q and k under a huge scale: exactly zero gradients with finite bounds", "[cpu]") {
  // s = 0 everywhere, d_q = scale dS k = 0 and d_k = scale dS^T q = 0 exactly, but scale (2^800)
  // times the norm of dS's error weights (~2^550) overflows: a zero column of k or q must make the
  // product 0, not inf * 0 = NaN (the fuzz campaign's scale 1.3e248 with d_o ~ 3e91).
  const Problem p{.heads_q = 2, .n_q = 3, .n_k = 6, .d = 5, .dtype = DType::F64, .scale = 0x1p+800};
  Tensors64 in = inputs(p, 300, 300, 3);
  std::fill(in.q.begin(), in.q.end(), 0.0);
  std::fill(in.k.begin(), in.k.end(), 0.0);
  const Certified c = certified(p, in);
  for (const Precision& prec : {fp64_kernel(), Precision{DType::F64, undeclared_arithmetic(DType::F64)}}) {
    const Bounds B = error_bounds(p, in, c, prec);
    for (const auto& [value, err, bound] :
         {std::tuple{&c.value.d_q, &c.err.d_q, &B.d_q}, {&c.value.d_k, &c.err.d_k, &B.d_k}}) {
      for (size_t x = 0; x < value->size(); ++x) {
        CHECK((*value)[x] == 0.0);
        CHECK((*err)[x] == 0.0);
        CHECK(std::isfinite((*bound)[x]));
      }
      CHECK(within_bound(std::vector<double>(value->size(), 0.0), *value, *bound, DType::F64).ok);
      std::vector<double> moved(value->size(), 0.0);
      moved[1] = 2 * (*bound)[1];  // past the bound (the chain's underflow floor, scaled: ~1e-80)
      CHECK_FALSE(within_bound(moved, *value, *bound, DType::F64).ok);
    }
  }
}

}  // namespace fc::ref

namespace fc::ref {

// A GQA group of 512 BF16 heads whose d_k, d_v are summed from per-head gradients stored in BF16
// (Arithmetic::kv_per_head, what a kernel that declares nothing is charged): 511 adds at u = 2^-8,
// so a first-order (G - 1) u passes 1. The bound stays finite, and it holds against that arithmetic
// replayed: each head's gradient (the certified oracle's, on k and v repeated per head) rounded to
// BF16 and the group summed in BF16, one add at a time.
// At G = 2^18 the factor (1 + 2^-8)^(G - 1) overflows a double: the bound is then what any finite
// stored value satisfies, still finite.
TEST_CASE("error bounds stay finite and sound for a 512-head BF16 group summed from stored heads", "[cpu]") {
 for (const int32_t G : {512, 1 << 18}) {
  INFO("group " << G);
  const Problem p{.batch = 1, .heads_q = G, .heads_kv = 1, .n_q = 1, .n_k = 2, .d = 1, .dtype = DType::BF16,
                  .mask = Mask::None, .scale = 1.0};
  Problem mha = p;
  mha.heads_kv = G;
  std::mt19937_64 rng(25);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto bf16 = [&] { return round_to(DType::BF16, normal(rng)); };
  Tensors64 in, in_mha;
  for (int64_t x = 0; x < numel_q(p); ++x) in.q.push_back(bf16()), in.d_o.push_back(bf16());
  for (int64_t x = 0; x < numel_kv(p); ++x) in.k.push_back(bf16()), in.v.push_back(bf16());
  in_mha.q = in.q, in_mha.d_o = in.d_o;
  for (int32_t h = 0; h < G; ++h)  // (1, G, 2, 1): every head's own copy of the shared k, v
    in_mha.k.insert(in_mha.k.end(), in.k.begin(), in.k.end()), in_mha.v.insert(in_mha.v.end(), in.v.begin(), in.v.end());
  const Certified ref = certified(p, in), per_head = certified(mha, in_mha);
  Precision pr;
  pr.storage = DType::BF16;
  pr.ar = undeclared_arithmetic(DType::BF16);
  const Bounds b = error_bounds(p, in, ref, pr);
  for (const auto& [name, bound, value, heads] :
       {std::tuple{"d_k", &b.d_k, &ref.value.d_k, &per_head.value.d_k},
        std::tuple{"d_v", &b.d_v, &ref.value.d_v, &per_head.value.d_v}}) {
    for (int64_t j = 0; j < p.n_k; ++j) {
      INFO(name << " key " << j);
      double sum = 0, mag = 0;  // the group summed in BF16 from BF16 per-head values; sum |per head|
      for (int32_t h = 0; h < G; ++h) {
        const double y = round_to(DType::BF16, (*heads)[size_t(h * p.n_k + j)]);
        sum = h == 0 ? y : round_to(DType::BF16, sum + y), mag += std::fabs((*heads)[size_t(h * p.n_k + j)]);
      }
      const double bd = (*bound)[size_t(j)];
      REQUIRE(std::isfinite(bd));
      CHECK(std::fabs(sum - (*value)[size_t(j)]) <= bd);
      // Not vacuous: within the per-term factor (1 + 2^-8)^511 (1 + 2^-24)^511 - 1 < 6.4 of sum |terms|
      // (plus the chains and the roundings around them).
      if (G == 512) CHECK(bd <= 8 * mag + 1e-3);
    }
  }
 }
}

}  // namespace fc::ref
