#include "properties/laws.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "properties/generators.hpp"
#include "reference/gpu/oracle_select.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {
namespace {

// The share of a GPU kernel's cases drawn GPU-sized (GenSpec::large_percent): >= 30 % of them span
// >= 3 key tiles; the rest keep the small shapes that shrink well and the oracle judges fast.
constexpr int32_t kLargePercent = 40;
// The share of an outside kernel's cases drawn on its other paths (GenSpec::path_percent).
constexpr int32_t kPathPercent = 25;
// The share of a GPU kernel's cases with rows of 4096 .. 131072 keys (GenSpec::long_percent), in every
// law that draws cases: each law has its own way of failing at production lengths.
constexpr int32_t kLongPercent = 12;

// Long rows for kernel info i: where the certified oracle of the longest such case (two sequences of 8
// rows of a GQA group of 4 against long_max keys, the largest head dim) runs on the GPU under the
// process's --oracle; 0 elsewhere (the CPU oracle would take seconds per case).
int32_t long_max_for(const KernelInfo& i) {
  if (i.device == "cpu") return 0;
  const int32_t n_max = i.n_k.max > 0 ? std::min(i.n_k.max, 131072) : 131072;
  if (n_max < kLongMin) return 0;
  Problem p;
  p.batch = 2, p.heads_q = 4, p.heads_kv = 1, p.n_q = 8, p.n_k = n_max;
  p.d = i.head_dims.empty() ? 256 : *std::max_element(i.head_dims.begin(), i.head_dims.end());
  p.dtype = i.dtypes.empty() ? DType::F32 : i.dtypes.front();
  p.mask = Mask::CausalBottomRight;
  return ref::uses_gpu(ref::oracle(), p, i.backward) ? n_max : 0;
}

template <class V, class X>
bool has(const V& v, X x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool is_causal(Mask m) { return m != Mask::None; }

}  // namespace

const std::vector<Law>& laws() {
  static const std::vector<Law> table = [] {
    std::vector<Law> t;
    add_reference_laws(t);
    add_variant_laws(t);  // n/a at once for kernels without variants; first for the variant mutants
    add_order_laws(t);
    add_hull_laws(t);
    add_metamorphic_laws(t);
    add_structural_laws(t);
    add_hostile_laws(t);
    add_softmax_laws(t);
    add_merge_laws(t);
    add_large_laws(t);  // last: one huge case per run
    return t;
  }();
  return table;
}

const Law* find_law(const std::string& id) {
  for (const Law& l : laws())
    if (l.id == id) return &l;
  return nullptr;
}

bool law_applies(const Law& law, const Kernel& k) {
  const KernelInfo& i = k.info;
  if (law.merge != (i.kind == KernelKind::Merge)) return false;
  if (law.needs_splits && split_pairs(i).empty()) return false;
  if (law.needs_backward && !i.backward) return false;
  if (law.needs_lse && !i.writes_lse) return false;
  if (!covers(i.variants, law.needs_variants)) return false;
  if (law.mask_none_only && !has(i.masks, Mask::None)) return false;
  if (law.needs_causal && std::none_of(i.masks.begin(), i.masks.end(), is_causal)) return false;
  if (law.needs_tiles && !i.any_tile && i.configs.size() < 2) return false;
  if (law.needs_large_offsets && !i.large_offsets) return false;
  if (law.device_only && i.device == "cpu") return false;
  if (law.pow2_scale && i.fixed_scale > 0 && !is_pow2(i.fixed_scale)) return false;  // exact scores need 2^k
  if (!law.only_dtypes.empty() && spec_for(law, k).dtypes.empty() && spec_for(law, k).mixed_dtypes.empty())
    return false;
  if (law.needs_exact && !law.needs_exact(i).empty()) return false;
  if (law.needs_baseline) {
    const Kernel* base = find_kernel("cpu_naive");
    if (!base || base->info.name == i.name) return false;
  }
  return !claimed_regimes(law, k).empty();
}

// Whether the kernel declares an fp16 P.V accumulator (or one as narrow): the unnormalised sum of
// P_j v_j with v near 65504 overflows it by design, so the fp16_max regime lies outside what it
// declares it represents.
bool narrow_pv_accumulator(const Kernel& k) {
  if (!k.info.arithmetic) return false;
  Problem p;
  p.dtype = DType::F16, p.n_q = p.n_k = 64, p.d = 64, p.scale = 0.125;
  const Config cfg = k.info.configs.empty() ? Config{} : k.info.configs.front();
  return ref::unit_roundoff(k.info.arithmetic(p, cfg).pv.acc) >= ref::unit_roundoff(DType::F16);
}

std::vector<Regime> claimed_regimes(const Law& law, const Kernel& k) {
  std::vector<Regime> out;
  const bool narrow = narrow_pv_accumulator(k);
  for (Regime r : law.regimes) {
    if (r == Regime::Fp16Max && (!has(k.info.dtypes, DType::F16) || narrow)) continue;
    if (r == Regime::FullyMasked && (law.mask_none_only || !has(k.info.masks, Mask::CausalBottomRight))) continue;
    // Long rows need >= 256 visible keys (classify): out of reach under a smaller declared or --max-n bound.
    if (r == Regime::LongRow && k.info.n_k.max > 0 && k.info.n_k.max < 256) continue;
    out.push_back(r);
  }
  return out;
}

GenSpec spec_for(const Law& law, const Kernel& k) {
  const KernelInfo& i = k.info;
  GenSpec s;
  s.dtypes = i.dtypes;
  s.mixed_dtypes = i.mixed_dtypes;
  if (!law.only_dtypes.empty())  // a law defined for some storage types: combinations of those only
    s.mixed_dtypes.erase(std::remove_if(s.mixed_dtypes.begin(), s.mixed_dtypes.end(),
                                        [&](const DtypeSet& t) {
                                          return !has(law.only_dtypes, t.q) || !has(law.only_dtypes, t.kv) ||
                                                 !has(law.only_dtypes, t.o);
                                        }),
                         s.mixed_dtypes.end());
  // fp32 first where offered: shrinking moves toward the first element, the plainest dtype.
  auto f32 = std::find(s.dtypes.begin(), s.dtypes.end(), DType::F32);
  if (f32 != s.dtypes.end()) std::rotate(s.dtypes.begin(), f32, f32 + 1);
  if (!law.only_dtypes.empty())
    s.dtypes.erase(std::remove_if(s.dtypes.begin(), s.dtypes.end(), [&](DType t) { return !has(law.only_dtypes, t); }),
                   s.dtypes.end());
  s.masks.clear();
  for (Mask m : {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight}) {
    if (!has(i.masks, m)) continue;
    if (law.mask_none_only && m != Mask::None) continue;
    if (law.needs_causal && m == Mask::None) continue;
    s.masks.push_back(m);
  }
  s.head_dims = i.head_dims;
  s.gqa = i.gqa;
  s.backward = law.backward && i.backward;
  s.any_tile = i.any_tile;
  s.configs = i.configs.empty() ? std::vector<Config>{Config{}} : i.configs;
  s.regimes = claimed_regimes(law, k);
  s.min_n = law.min_n, s.min_d = law.min_d;
  s.s_in_storage = i.stores_s_p;  // as precision_of decides
  s.pow2_scale = law.pow2_scale;
  s.large_percent = i.device == "cpu" ? 0 : kLargePercent;
  s.n_q = i.n_q, s.n_k = i.n_k;
  s.max_batch = i.max_batch, s.max_heads = i.max_heads;
  s.fixed_scale = i.fixed_scale;
  s.path_percent = i.external ? kPathPercent : 0;
  s.long_max = long_max_for(i);
  s.long_percent = s.long_max > 0 ? kLongPercent : 0;
  return s;
}

std::string case_outside_law(const Law& law, const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  if (!claims(k, p)) return fmt::format("{} does not claim this problem", k.info.name);
  if (law.mask_none_only && p.mask != Mask::None) return "holds only without a mask";
  if (!law.judges_variants && covers(Variants{}, law.needs_variants) && !covers(Variants{}, variants_of(c.in)))
    return "a law of dense attention: the inputs use a variant";
  if (law.needs_causal && p.mask == Mask::None) return "needs a causal mask";
  if (law.needs_backward && !c.in.has_d_o()) return "needs d_o (a backward)";
  if (!law.only_dtypes.empty() &&
      !(has(law.only_dtypes, dtype_q(p)) && has(law.only_dtypes, dtype_kv(p)) && has(law.only_dtypes, dtype_o(p))))
    return fmt::format("not defined for {} storage", dtypes_str(p));
  if (p.n_q < law.min_n || p.n_k < law.min_n || p.d < law.min_d)
    return fmt::format("needs n_q, n_k >= {} and d >= {}", law.min_n, law.min_d);
  return "";
}

bool has_backward(const Kernel& k, const Case& c) { return k.info.backward && c.in.has_d_o(); }

std::string same_bits(const Problem& p, const char* name, const HostTensor& a, const HostTensor& b) {
  if (a.bytes == b.bytes && a.shape == b.shape) return "";
  if (a.numel() != b.numel()) return fmt::format("{}: {} elements, then {}\n", name, a.numel(), b.numel());
  const int sz = dtype_size(a.dtype);
  for (int64_t x = 0, end = a.numel(); x < end; ++x)
    if (std::memcmp(a.bytes.data() + x * sz, b.bytes.data() + x * sz, size_t(sz)) != 0)
      return fmt::format("{}: {} = {:.9g} in one run and {:.9g} in the other (the same bits expected)\n", name,
                         element_name(p, name, x), a.get(x), b.get(x));
  return "";
}

bool is_pow2(double x) {
  int e = 0;
  return x != 0 && std::isfinite(x) && std::fabs(std::frexp(x, &e)) == 0.5;
}

bool dots_exact(const Inputs& in, double u) {
  const Problem& p = in.p;
  double q_max = 0, k_max = 0;  // in units of 1/8
  for (const HostTensor* t : {&in.q, &in.k})
    for (int64_t x = 0, end = t->numel(); x < end; ++x) {
      const double y = t->get(x) * 8;
      if (y != std::nearbyint(y) || !(std::fabs(y) < 2048)) return false;
      (t == &in.q ? q_max : k_max) = std::max(t == &in.q ? q_max : k_max, std::fabs(y));
    }
  // Products are integers below 2^22 over 64, exact; every partial sum is an integer over 64 below
  // d q_max k_max, exact while that stays below the accumulator's 2^p = 1 / u (u = 2^-p).
  return double(p.d) * q_max * k_max < 1 / u;
}

std::string same_values(const Problem& p, const char* name, const HostTensor& a, const HostTensor& b) {
  if (a.numel() != b.numel()) return fmt::format("{}: {} elements, then {}\n", name, a.numel(), b.numel());
  for (int64_t x = 0, end = a.numel(); x < end; ++x) {
    const double y = a.get(x), z = b.get(x);
    if (!(y == z || (std::isnan(y) && std::isnan(z))))
      return fmt::format("{}: {} = {:.9g} in one run and {:.9g} in the other (the same value expected)\n", name,
                         element_name(p, name, x), y, z);
  }
  return "";
}

std::string within(const Problem& p, const char* name, const std::vector<double>& got,
                   const std::vector<double>& expected, const std::vector<double>& bound, DType dt) {
  // The laws' own criteria may be vacuous where their terms overflow (huge scores): no claim there.
  const ref::Verdict v = ref::within_bound(got, expected, bound, dt, ref::Infinite::NoClaim);
  if (v.ok) return "";
  if (v.worst < 0) return fmt::format("{}: {}\n", name, v.why);
  return fmt::format("{}: {} = {:.9g}, expected {:.17g}, |difference| {:.3g} > bound {:.3g} ({})\n", name,
                     element_name(p, name, v.worst), got[size_t(v.worst)], expected[size_t(v.worst)], v.measured,
                     v.bound, v.why);
}

std::string agree(const Problem& p, const char* name, const HostTensor& a, const HostTensor& b,
                  const std::vector<double>& bound_a, const std::vector<double>& bound_b) {
  std::vector<double> sum(bound_a.size());
  for (size_t x = 0; x < sum.size(); ++x) sum[x] = bound_a[x] + bound_b[x];
  return within(p, name, a.to_f64(), b.to_f64(), sum, a.dtype);
}

}  // namespace fc::props
