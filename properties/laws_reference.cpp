// Laws held against the certified reference and its error bound: agreement, in the ordinary and in
// the extreme regimes. The ordinary regimes include V = 1 and fully masked rows: docs/laws.md's "rows
// sum to one" and "fully masked rows give o = 0, lse = -inf" are this law on those inputs (the
// reference and its bound are exact there).
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "properties/execute.hpp"
#include "properties/laws.hpp"

namespace fc::props {
namespace {

std::string law_reference(const Kernel& k, const Case& c) {
  const Run r = execute(k, c.in, c.cfg, has_backward(k, c));
  if (!r.error.empty()) return r.error;
  return check_outputs(k, c.in, r.out, oracle(k, c.in, c.cfg));
}

}  // namespace

void add_reference_laws(std::vector<Law>& out) {
  using R = Regime;
  out.push_back(
      {.id = "reference",
       .sentence = "every output agrees with the certified reference within its error bound",
       .regimes = {R::Normal, R::Outliers, R::Ties, R::AllEqual, R::Grid, R::FullyMasked, R::Ones, R::LongRow},
       .backward = true,
       .check = law_reference});
  out.push_back({.id = "extreme",
                 .sentence = "extreme inputs stay within the bound and finite where the reference is finite",
                 .regimes = {R::Huge, R::FarBelow, R::Fp16Max, R::SubnormalP, R::Subnormal, R::Outliers},
                 .backward = true,
                 .check = law_reference});
}

}  // namespace fc::props
