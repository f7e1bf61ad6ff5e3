// The merge kernels' error bound (reference/bounds_merge.*): cpu_merge within it on merges of every
// dtype, extreme lse, empty partials and up to 16 partials; each merge mutant outside it (or NaN) on a
// problem its fault reaches. And split_invariance's tolerance: cpu_tiled's split run within it, the
// tolerance not vacuous, the split mutant outside it.
#include "tests/catch.hpp"
#include <cmath>
#include <iostream>
#include <limits>
#include <random>

#include "kernels/registry.hpp"
#include "properties/differential.hpp"
#include "reference/bounds.hpp"
#include "reference/bounds_merge.hpp"
#include "verdict/verdict.hpp"

namespace {

using namespace fc;
constexpr double kInf = std::numeric_limits<double>::infinity();

MergeInputs draw(std::mt19937_64& rng, MergeProblem p, double base, double spread, double empty_rate) {
  MergeInputs in;
  in.p = p;
  in.o = HostTensor(p.dtype, shape_merge_o_partial(p));
  in.lse = HostTensor(DType::F32, shape_merge_lse_partial(p));
  std::normal_distribution<double> n(0, 1);
  std::uniform_real_distribution<double> u(0, 1);
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t q = 0; q < p.partials; ++q) {
        const bool empty = u(rng) < empty_rate;
        double l = empty ? -kInf : round_to(DType::F32, base + spread * n(rng));
        if (!empty && std::isinf(l)) l = l > 0 ? 0x1.fffffep127 : -0x1.fffffep127;
        in.lse.set(merge_lse_index(p, q, h, r), l);
        for (int64_t c = 0; c < p.d_v; ++c) in.o.set(merge_o_index(p, q, r, h, c), empty ? 0.0 : n(rng));
      }
  return in;
}

// k's merge of in held to the certified merge within the merge bound, one tensor ("o" or "lse").
ref::Verdict judged(const Kernel& k, const MergeInputs& in, const char* tensor) {
  const MergeOutputs out = run_merge(k, in);
  const ref::Merge64 m{in.p.partials, in.p.rows, in.p.heads, in.p.d_v, in.o.to_f64(), in.lse.to_f64()};
  const ref::CertifiedMerge c = ref::certified_merge(m);
  const ref::MergeBounds b = ref::merge_bounds(m, c, in.p.dtype);
  if (std::string(tensor) == "o") return ref::within_bound(out.o.to_f64(), c.value.o, b.o, in.p.dtype);
  return ref::within_bound(out.lse.to_f64(), c.value.lse, b.lse, DType::F32);
}

}  // namespace

TEST_CASE("merge bound: cpu_merge is within it on every dtype, extreme lse and empty partials", "[cpu]") {
  const Kernel& k = *find_kernel("cpu_merge");
  std::mt19937_64 rng(11);
  double worst_o = 0, worst_lse = 0;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int32_t P : {1, 3, 16})
      for (double base : {0.0, 80.0, -1e4, 1e5, 3e38})
        for (double spread : {0.5, 4.0, 400.0}) {
          const MergeInputs in = draw(rng, {P, 2, 3, 8, t}, base, spread, 0.25);
          for (const char* tensor : {"o", "lse"}) {
            const ref::Verdict v = judged(k, in, tensor);
            INFO(dtype_name(t) << " P " << P << " base " << base << " spread " << spread << " " << tensor << ": "
                               << v.why);
            CHECK(v.ok);
            (tensor[0] == 'o' ? worst_o : worst_lse) = std::max(tensor[0] == 'o' ? worst_o : worst_lse, v.ratio);
          }
        }
  std::cout << "cpu_merge: largest measured/bound o " << worst_o << ", lse " << worst_lse << "\n";
}

TEST_CASE("merge bound: each merge mutant falls outside it where its fault shows", "[cpu]") {
  std::mt19937_64 rng(5);
  // fp16 weights: o off by about 2^-11 of the partials' spread, far above an fp32 merge's bound.
  const MergeInputs spread4 = draw(rng, {6, 2, 2, 8, DType::F32}, 1.0, 4.0, 0.0);
  CHECK_FALSE(judged(*find_kernel("mutant_merge_fp16_weights"), spread4, "o").ok);
  CHECK(judged(*find_kernel("cpu_merge"), spread4, "o").ok);
  // lse read transposed: rows and heads both > 1.
  CHECK_FALSE(judged(*find_kernel("mutant_merge_lse_transposed"), spread4, "o").ok);
  // No max subtracted: exp(lse) overflows at lse ~ 100.
  const MergeInputs high = draw(rng, {4, 1, 1, 4, DType::F32}, 100.0, 4.0, 0.0);
  CHECK_FALSE(judged(*find_kernel("mutant_merge_no_max"), high, "o").ok);
  CHECK(judged(*find_kernel("cpu_merge"), high, "o").ok);
  // exp(-inf - -inf): a row of only empty partials.
  const MergeInputs empty = draw(rng, {3, 1, 1, 4, DType::F32}, 0.0, 1.0, 1.0);
  CHECK_FALSE(judged(*find_kernel("mutant_merge_nan_empty"), empty, "lse").ok);
  CHECK(judged(*find_kernel("cpu_merge"), empty, "lse").ok);
  // A -5e4 sentinel weighs against lse near -5e4.
  MergeInputs low = draw(rng, {3, 1, 1, 4, DType::F32}, -5e4, 2.0, 0.0);
  low.lse.set(0, -kInf);
  for (int64_t c = 0; c < 4; ++c) low.o.set(c, 0.0);
  CHECK_FALSE(judged(*find_kernel("mutant_merge_sentinel"), low, "o").ok);
  CHECK(judged(*find_kernel("cpu_merge"), low, "o").ok);
}

TEST_CASE("split invariance: cpu_tiled's splits within the tolerance, which is not vacuous; a dropped tile outside",
          "[cpu]") {
  std::mt19937_64 rng(2);
  std::normal_distribution<double> n(0, 1);
  Inputs in;
  in.p.heads_q = 2, in.p.heads_kv = 1, in.p.n_q = 5, in.p.n_k = 70, in.p.d = 16;  // 70 = 4 tiles of 16 + 6
  in.p.scale = default_scale(in.p.d);
  for (auto [t, shape] : {std::pair{&in.q, shape_q(in.p)}, {&in.k, shape_kv(in.p)}, {&in.v, shape_v(in.p)}}) {
    *t = HostTensor(DType::F32, shape);
    for (int64_t x = 0; x < t->numel(); ++x) t->set(x, n(rng));
  }
  Config whole, split;
  whole.block_m = split.block_m = 16, whole.block_n = split.block_n = 16, split.splits = 3;
  const Kernel& k = *find_kernel("cpu_tiled");
  const ref::Certified c = verdict::certify(in);
  const props::ForwardTolerance t = props::forward_unshared(k, in, c, whole, props::Shared::Scores) +
                                    props::forward_unshared(k, in, c, split, props::Shared::Scores);
  const Outputs a = run_forward(k, in, whole), b = run_forward(k, in, split);
  double differs = 0, worst = 0, largest_tol = 0;
  for (int64_t x = 0; x < a.o.numel(); ++x) {
    const double d = std::fabs(a.o.get(x) - b.o.get(x));
    differs = std::max(differs, d);
    worst = std::max(worst, d / t.o[size_t(x)]);
    largest_tol = std::max(largest_tol, t.o[size_t(x)]);
  }
  std::cout << "split 3 vs unsplit: largest |difference| " << differs << ", measured/tolerance " << worst
            << ", largest tolerance " << largest_tol << "\n";
  CHECK(worst <= 1);
  CHECK(largest_tol < 1e-4);  // not vacuous: o is O(1)
  const Outputs dropped = run_forward(*find_kernel("mutant_split_drop_tail"), in, split);
  bool outside = false;
  for (int64_t x = 0; x < a.o.numel(); ++x) outside |= std::fabs(a.o.get(x) - dropped.o.get(x)) > t.o[size_t(x)];
  CHECK(outside);
}
