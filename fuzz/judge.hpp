// Judging one decoded case, for the kernel harness and the `flashcheck fuzz` campaign. What holds
// for every input is always checked; what the error model covers only where it covers it:
//   - always: rows that see no key give o = 0, lse = -inf, d_q = 0 (never NaN, whatever q and d_o hold);
//   - non-finite inputs (or F64 values past the certified oracle's 2^500): the blast radius — every
//     row and key gradient no non-finite value can reach is bit-identical to the run on the same
//     inputs with those values replaced by 0 (several poisoned positions at once, in q, k, v, d_o);
//   - finite inputs in the error model's domain (in_domain): every output within its bound of the
//     certified reference, and one law (docs/laws.md) (chosen by the caller) among those that claim the
//     case's regime.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/registry.hpp"
#include "properties/case.hpp"
#include "verdict/verdict.hpp"

namespace fc::fuzz {

struct Judgement {
  std::string check;        // what was held: "reference+<law>", "blast_radius", "structure"
  std::string failure;      // "" when it held; otherwise what broke, one or more lines
  std::string unavailable;  // `--oracle gpu` could not take the case (its reason): the campaign stops, exit 2
  bool ok() const { return failure.empty(); }
};

// The domain the a-priori bounds are derived for: finite inputs (F64: below 2^500), every partial sum
// of scale.q.k finite in fp32 and within max_score_for, and (with d_o) the backward's intermediates
// (d_o.v, dS, the d_q / d_k / d_v sums) below a quarter of fp32's range — of the storage type's, for
// a kernel that stores S and P in it. `why` (optional) says which condition failed.
bool in_domain(const Kernel& k, const Inputs& in, std::string* why = nullptr);

// Runs k on c and judges it; `law_pick` chooses among the applicable laws (any value is fine).
Judgement judge(const Kernel& k, const props::Case& c, uint64_t law_pick);

// The same without a law, on outputs the caller already has (the campaign runs many cases in one
// launch): `run` is k's run on c.in, `clean` its run on c.in with non-finite values replaced by 0
// (needed only when c.in holds any; null: run here).
Judgement judge_run(const Kernel& k, const props::Case& c, const verdict::Run& run, const verdict::Run* clean);

// c.in with every non-finite (or uncertifiable) value replaced by 0; false when there was none.
bool clean_inputs(Inputs& in);

}  // namespace fc::fuzz
