// The judge: correct kernels pass on decoded cases, and each kind of fault is caught by the check
// meant for it — mutants as negative controls (a judge that cannot fail tests nothing).
#include "tests/catch.hpp"
#include <cmath>
#include <limits>

#include "fuzz/decode.hpp"
#include "fuzz/judge.hpp"

using namespace fc;

namespace {

// Failures of `kernel` over `n` seeded cases, by check.
std::map<std::string, int> failures(const std::string& kernel, int n, uint64_t seed0 = 100) {
  const Kernel& k = *find_kernel(kernel);
  std::map<std::string, int> out;
  fuzz::ShapeLimits lim;
  lim.max_n = 12, lim.max_d = 6;
  for (int i = 0; i < n; ++i) {
    fuzz::ByteSource src(seed0 + uint64_t(i));
    const props::Case c = fuzz::decode_case(src, k, lim);
    if (!claims(k, c.in.p)) continue;
    const fuzz::Judgement j = fuzz::judge(k, c, uint64_t(i));
    if (!j.ok()) ++out[j.check];
  }
  return out;
}

}  // namespace

TEST_CASE("the fuzz judge passes the correct CPU kernels", "[cpu]") {
  int kernels = 0;
  for (const Kernel& k : registry()) {  // every correct CPU attention kernel of the registry
    if (k.info.mutant || k.info.device != "cpu" || k.info.kind != KernelKind::Attention) continue;
    ++kernels;
    CAPTURE(k.info.name);
    CHECK(failures(k.info.name, 150).empty());
  }
  CHECK(kernels >= 2);  // cpu_naive and cpu_tiled at least
}

TEST_CASE("the fuzz judge catches planted faults, each with the check meant for it", "[cpu]") {
  CHECK(failures("mutant_no_o_rescale", 150)["reference"] > 0);
  CHECK(failures("mutant_masked_row_nan", 150)["structure"] > 0);  // empty rows must be 0 / -inf
  CHECK(failures("mutant_scale_twice", 150)["reference"] > 0);
  CHECK(failures("mutant_masked_products", 300)["blast_radius"] > 0);
}

TEST_CASE("the blast radius holds several poisoned positions at once, in q, k, v and d_o", "[cpu]") {
  const Kernel& k = *find_kernel("cpu_tiled");
  props::Case c;
  Problem& p = c.in.p;
  p = Problem{1, 2, 1, 6, 4, 3, DType::F32, Mask::CausalBottomRight, 0.5};
  c.in.q = HostTensor(p.dtype, shape_q(p));   // (1, 2, 6, 3)
  c.in.k = HostTensor(p.dtype, shape_kv(p));  // (1, 1, 4, 3)
  c.in.v = HostTensor(p.dtype, shape_kv(p));  // (1, 1, 4, 3)
  c.in.d_o = HostTensor(p.dtype, shape_q(p));
  for (HostTensor* t : {&c.in.q, &c.in.k, &c.in.v, &c.in.d_o})
    for (int64_t i = 0; i < t->numel(); ++i) t->set(i, double(i % 5) - 2);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  c.in.q.set(0, nan);        // head 0, row 0: sees no key (n_q > n_k, bottom-right)
  c.in.k.set(3 * 3, inf);    // key 3: seen by the last row only
  c.in.d_o.set(4 * 3, nan);  // head 0, row 4
  c.in.q.set(6 * 3 + 5, -inf);
  const fuzz::Judgement j = fuzz::judge(k, c, 0);
  CAPTURE(j.failure);
  CHECK(j.check == "blast_radius");
  CHECK(j.ok());
  // And a kernel that multiplies masked pairs through breaks it (with d_o clean: a non-finite d_o row
  // may reach every key of its group, docs/SEMANTICS.md, so it would hide the q and k poisons' leaks).
  c.in.d_o.set(4 * 3, 1.0);
  const fuzz::Judgement m = fuzz::judge(*find_kernel("mutant_masked_products"), c, 0);
  CHECK(m.check == "blast_radius");
  CHECK_FALSE(m.ok());
}

TEST_CASE("in_domain marks the error model's limits", "[cpu]") {
  const Kernel& k = *find_kernel("cpu_tiled");
  Inputs in;
  in.p = Problem{1, 1, 1, 2, 2, 2, DType::F32, Mask::None, 1.0};
  in.q = HostTensor(DType::F32, shape_q(in.p));   // (1, 1, 2, 2)
  in.k = HostTensor(DType::F32, shape_kv(in.p));  // (1, 1, 2, 2)
  in.v = HostTensor(DType::F32, shape_kv(in.p));  // (1, 1, 2, 2)
  std::string why;
  CHECK(fuzz::in_domain(k, in, &why));
  in.p.scale = 1e60;  // not an fp32 value
  CHECK_FALSE(fuzz::in_domain(k, in, &why));
  in.p.scale = 1;
  in.v.set(0, 3e38);  // the unnormalised accumulator would overflow
  CHECK_FALSE(fuzz::in_domain(k, in, &why));
  in.v.set(0, 1);
  in.q.set(0, std::numeric_limits<double>::infinity());
  CHECK_FALSE(fuzz::in_domain(k, in, &why));
  CHECK(why.rfind("a non-finite", 0) == 0);
}
