// The hostile harness's call sequence: a kernel's outputs depend on its inputs only, not on the calls
// before it. Stale scratch (a workspace kept across calls and read where this call did not write),
// state cached by shape (a layout plan, strides, a dtype's code path looked up by the problem's sizes
// alone) and counters pass every law that calls a problem once in one layout; here one case is called
// again after calls of its own shape with other data, other strides and another dtype.
#include <fmt/format.h>

#include <optional>
#include <utility>
#include <random>

#include "kernels/hostile.hpp"
#include "properties/laws.hpp"
#include "properties/variant_gen.hpp"
#include "verdict/verdict.hpp"

namespace fc::props {
namespace {

// c's inputs with other values of the same shape and dtype: q, k, v, d_o redrawn on a coarse grid and
// scaled by 16, so that anything left of them changes the case's outputs.
Inputs other_data(const Inputs& in, uint64_t seed) {
  Inputs out = in;
  std::mt19937_64 rng(seed ^ 0x5DEECE66Dull);
  for (HostTensor* t : {&out.q, &out.k, &out.v, &out.d_o})
    for (int64_t x = 0; !t->shape.empty() && x < t->numel(); ++x) t->set(x, double(int64_t(rng() % 17) - 8) * 2);
  return out;
}

// c's values in dtype t (rounded), or nullopt when the kernel does not claim the problem in t.
std::optional<Inputs> in_dtype(const Kernel& k, const Inputs& in, DType t) {
  Inputs out = in;
  out.p.dtype = t;
  for (HostTensor* x : {&out.q, &out.k, &out.v, &out.d_o}) {
    if (x->shape.empty()) continue;
    const HostTensor from = x->contiguous();
    HostTensor to(t, from.shape);
    for (int64_t e = 0; e < from.numel(); ++e) to.set(e, from.get(e));
    *x = std::move(to);
  }
  if (!validate(out).empty() || !claims(k, out)) return std::nullopt;
  return out;
}

// The case once more after the interlude: "" when it gives a's outputs again.
std::string again(const Kernel& k, const Case& c, const Config& cfg, const Run& a, bool bwd, const std::string& after) {
  const Run r = execute(k, c.in, cfg, bwd);
  if (!r.error.empty()) return fmt::format("the case again, after a call {}: {}", after, r.error);
  const std::string msg = repeat_difference(k, c, cfg, a, r, bwd);
  return msg.empty() ? "" : fmt::format("the case again, after a call {}: {}", after, msg);
}

// The interlude's own outputs against the certified reference.
std::string judged(const Kernel& k, const Inputs& in, const Config& cfg, bool bwd, const std::string& what) {
  const Run r = execute(k, in, cfg, bwd);
  if (!r.error.empty()) return fmt::format("the same problem {}: {}", what, r.error);
  const std::string msg = check_outputs(k, in, r.out, oracle(k, in, cfg));
  return msg.empty() ? "" : fmt::format("the same problem {}: {}", what, msg);
}

// One interlude per case, by its seed: other data (a third), other strides or layout (a third, where
// the kernel takes another), another dtype (a third, where it claims one); other data where the drawn
// one is not available. A case costs three calls and at most one certified reference.
std::string law_consecutive_calls(const Kernel& k, const Case& c) {
  const bool bwd = has_backward(k, c);
  const Config& cfg = c.cfg;
  const Run a = execute(k, c.in, cfg, bwd);
  if (!a.error.empty()) return a.error;
  const uint64_t pick = c.aux % 3;
  // Other strides: a kernel that takes strided inputs gets the case's values in a strided view (gaps
  // NaN); a plugin or Python kernel, which lays out its own tensors, the next layout it accepts.
  if (pick == 1 && k.info.variants.strides) {
    Rng rng(c.aux + 1);
    Inputs s = c.in;
    std::string how;
    for (auto [name, t] :
         {std::pair{"q", &s.q}, std::pair{"k", &s.k}, std::pair{"v", &s.v}, std::pair{"d_o", &s.d_o}}) {
      if (t->shape.empty()) continue;
      how += fmt::format("{}{} ", how.empty() ? "" : "; ", name);
      *t = draw_strided(*t, rng, &how);
    }
    if (claims(k, s)) {
      const std::string what = "in strided views (" + how + ")";
      if (std::string m = judged(k, s, cfg, bwd, what); !m.empty()) return m;
      return again(k, c, cfg, a, bwd, what);
    }
  }
  if (pick == 1 && k.info.external)
    for (int by = 1; by <= 2; ++by) {
      std::optional<LayoutShift> shift(std::in_place, by);
      if (!claims(k, c.in)) continue;
      const std::string what = fmt::format("in another layout (rotated by {})", by);
      if (std::string m = judged(k, c.in, cfg, bwd, what); !m.empty()) return m;
      shift.reset();
      return again(k, c, cfg, a, bwd, what);
    }
  // Another dtype of the same shape (the first the kernel claims it in).
  for (DType t : k.info.dtypes) {
    if (pick != 2 || t == c.in.p.dtype) continue;
    const std::optional<Inputs> other = in_dtype(k, c.in, t);
    if (!other) continue;
    const std::string what = fmt::format("in {}", dtype_name(t));
    if (std::string m = judged(k, *other, cfg, bwd, what); !m.empty()) return m;
    return again(k, c, cfg, a, bwd, what);
  }
  // Other data, the same shape and layout.
  if (const Run x = execute(k, other_data(c.in, c.aux), cfg, bwd); !x.error.empty())
    return "the same problem on other data: " + x.error;
  return again(k, c, cfg, a, bwd, "on other data of its shape");
}

}  // namespace

void add_hostile_laws(std::vector<Law>& out) {
  out.push_back({.id = "consecutive_calls",
                 .sentence = "a call's outputs do not depend on the calls before it (other data, strides or dtype "
                             "of its shape)",
                 .regimes = {Regime::Normal},
                 .backward = true,
                 .check = law_consecutive_calls});
}

}  // namespace fc::props
