// Laws held against the certified reference and its error bound: agreement, in the ordinary and in
// the extreme regimes. The ordinary regimes include V = 1 and fully masked rows: docs/laws.md's "rows
// sum to one" and "fully masked rows give o = 0, lse = -inf" are this law on those inputs (the
// reference and its bound are exact there).
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "properties/evidence.hpp"
#include "properties/laws.hpp"
#include "properties/variant_gen.hpp"
#include "reference/gpu/oracle_select.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {
namespace {

std::string judge(const Kernel& k, const Inputs& in, const Config& cfg) {
  const Run r = execute(k, in, cfg, k.info.backward && in.has_d_o());
  if (!r.error.empty()) return r.error;
  return check_outputs(k, in, r.out, oracle(k, in, cfg));
}

// A kernel that declares variants is judged on them too: in half the cases (by the case's own seed)
// the dense case becomes a variant problem of the variants it declares (variant_gen.hpp).
std::string law_reference(const Kernel& k, const Case& c) {
  if (covers(Variants{}, k.info.variants) || !covers(Variants{}, variants_of(c.in)) || c.aux % 2 == 0)
    return judge(k, c.in, c.cfg);
  Rng rng(c.aux);
  std::string how;
  // A GPU kernel's long paged problems take 8x the keys' work where the GPU oracle judges them
  // (variant_gen.hpp, to_long_paged); one the GPU oracle declines is drawn again at the CPU's cap.
  const Rng again = rng;
  const bool gpu = k.info.device != "cpu";
  Inputs in = with_variants(k.info.variants, c.in, c.cfg.block_n, rng, &how, k.info.mask_dtypes,
                            gpu ? kLongPagedWorkGpu : kLongPagedWork);
  if (gpu && is_paged(in.p) && !ref::uses_gpu(ref::oracle(), in.p, in.has_d_o())) {
    rng = again;
    in = with_variants(k.info.variants, c.in, c.cfg.block_n, rng, &how, k.info.mask_dtypes);
  }
  // A kernel may take a variant only under some masks or sizes (a window only with a causal mask):
  // a variant problem it does not claim leaves the case dense.
  if (!claims(k, in)) return judge(k, c.in, c.cfg);
  note_problem("variant problem", in);
  note_transform("variant problem drawn from the case: " + how);
  const std::string m = judge(k, in, c.cfg);
  return m.empty() ? "" : fmt::format("variant problem ({}): {}", how, m);
}

// The extreme regimes on dense problems: a softcap or ALiBi slope drawn from scores near the
// underflow or overflow thresholds is a problem of its own, not this law's.
std::string law_extreme(const Kernel& k, const Case& c) { return judge(k, c.in, c.cfg); }

}  // namespace

void add_reference_laws(std::vector<Law>& out) {
  using R = Regime;
  out.push_back(
      {.id = "reference",
       .sentence = "every output agrees with the certified reference within its error bound",
       .regimes = {R::Normal, R::Outliers, R::Ties, R::AllEqual, R::Grid, R::FullyMasked, R::Ones, R::LongRow},
       .backward = true,
       .judges_variants = true,
       .check = law_reference});
  out.push_back({.id = "extreme",
                 .sentence = "extreme inputs stay within the bound and finite where the reference is finite",
                 .regimes = {R::Huge, R::FarBelow, R::Fp16Max, R::SubnormalP, R::Subnormal, R::Outliers},
                 .backward = true,
                 .check = law_extreme});
}

}  // namespace fc::props
