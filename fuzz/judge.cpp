#include "fuzz/judge.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "properties/generators.hpp"
#include "properties/laws.hpp"
#include "reference/gpu/oracle_select.hpp"
#include "verdict/verdict.hpp"

namespace fc::fuzz {

using props::Regime;
namespace {

constexpr double kFltMax = double(std::numeric_limits<float>::max());

bool certifiable(double x) { return std::isfinite(x) && std::fabs(x) < 0x1p500; }

bool same_bits(const HostTensor& a, const HostTensor& b, int64_t x) {
  const size_t n = size_t(dtype_size(a.dtype));
  return a.dtype == b.dtype && std::memcmp(a.bytes.data() + size_t(x) * n, b.bytes.data() + size_t(x) * n, n) == 0;
}

// Rows that see no key: o = 0, lse = -inf, d_q = 0, whatever the inputs hold. (d_q only for a scale
// the kernel can hold: fp32 kernels take it in fp32, and a scale past fp32's range is inf there, so
// their d_q = scale.0 is NaN — docs/DECISIONS.md.)
std::string empty_rows(const Kernel& k, const Inputs& in, const Outputs& out) {
  const Problem& p = in.p;
  const bool scale_held = p.dtype == DType::F64 || !std::isinf(float(p.scale));
  for (int64_t row = 0; row < numel_lse(p); ++row) {
    if (n_visible(p.mask, row % p.n_q, p.n_q, p.n_k) > 0) continue;
    if (k.info.writes_lse && out.lse.get(row) != -std::numeric_limits<double>::infinity())
      return fmt::format("{} = {} on a row that sees no key (the contract: -inf)\n",
                         verdict::element_name(p, "lse", row), out.lse.get(row));
    for (int64_t x = row * p.d; x < (row + 1) * p.d; ++x) {
      if (out.o.get(x) != 0)
        return fmt::format("{} = {} on a row that sees no key (the contract: 0)\n", verdict::element_name(p, "o", x),
                           out.o.get(x));
      if (out.has_grads() && scale_held && out.d_q.get(x) != 0)
        return fmt::format("{} = {} on a row that sees no key (the contract: 0)\n", verdict::element_name(p, "d_q", x),
                           out.d_q.get(x));
    }
  }
  return "";
}

// Non-finite (or uncertifiable) elements replaced by 0; true when there were any.
bool cleaned(HostTensor& t) {
  bool any = false;
  if (t.shape.empty()) return false;  // an absent d_o
  for (int64_t i = 0, end = t.numel(); i < end; ++i)
    if (!certifiable(t.get(i))) t.set(i, 0.0), any = true;
  return any;
}

bool row_bad(const HostTensor& t, int64_t offset, int64_t d) {
  for (int64_t x = offset; x < offset + d; ++x)
    if (!certifiable(t.get(x))) return true;
  return false;
}

// The contract's blast radius with any number of poisoned positions, against the cleaned run.
std::string blast_radius(const Kernel& k, const props::Case& c, const verdict::Run& dirty, const verdict::Run* clean) {
  const Problem& p = c.in.p;
  const bool bwd = c.in.has_d_o() && dirty.out.has_grads();
  verdict::Run own;
  if (!clean) {
    Inputs in = c.in;
    clean_inputs(in);
    own = verdict::execute(k, in, c.cfg, bwd);
    clean = &own;
  }
  const verdict::Run& ref = *clean;
  if (!ref.error.empty()) return ref.error;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int32_t hk = 0; hk < p.heads_kv; ++hk) {
      std::vector<char> bad_key(size_t(p.n_k)), key_reached(size_t(p.n_k));
      bool group_reached = false;  // a non-finite d_o row of this (batch, kv head) reaches all its keys
      for (int64_t j = 0; j < p.n_k; ++j)
        bad_key[size_t(j)] =
            row_bad(c.in.k, offset_kv(p, b, hk, j), p.d) || row_bad(c.in.v, offset_kv(p, b, hk, j), p.d);
      for (int32_t h = 0; h < p.heads_q; ++h) {
        if (kv_head(p, h) != hk) continue;
        for (int64_t i = 0; i < p.n_q; ++i) {
          const int64_t nv = n_visible(p.mask, i, p.n_q, p.n_k), oq = offset_q(p, b, h, i);
          bool fwd = nv > 0 && row_bad(c.in.q, oq, p.d);
          for (int64_t j = 0; j < nv && !fwd; ++j) fwd = bad_key[size_t(j)];
          const bool bad_d_o = bwd && row_bad(c.in.d_o, oq, p.d);  // also a row that sees no key: its P = 0
          const bool grad = fwd || bad_d_o;
          if (grad)
            for (int64_t j = 0; j < nv; ++j) key_reached[size_t(j)] = 1;
          // d_v = P^T d_o and d_k = scale dS^T Q as a tile's products also multiply the masked pairs'
          // P = 0 and dS = 0 by d_o_i's row: IEEE makes 0 * NaN a NaN, so a non-finite d_o_i may reach
          // the gradients of every key of its group (docs/SEMANTICS.md), never another group's.
          group_reached = group_reached || bad_d_o;
          const int64_t ol = offset_lse(p, b, h, i);
          if (!fwd && k.info.writes_lse && !same_bits(dirty.out.lse, ref.out.lse, ol))
            return fmt::format("{} outside the blast radius changed: {} became {}\n",
                               verdict::element_name(p, "lse", ol), ref.out.lse.get(ol), dirty.out.lse.get(ol));
          for (int64_t x = oq; x < oq + p.d; ++x) {
            if (!fwd && !same_bits(dirty.out.o, ref.out.o, x))
              return fmt::format("{} outside the blast radius changed: {} became {}\n",
                                 verdict::element_name(p, "o", x), ref.out.o.get(x), dirty.out.o.get(x));
            if (bwd && !grad && !same_bits(dirty.out.d_q, ref.out.d_q, x))
              return fmt::format("{} outside the blast radius changed: {} became {}\n",
                                 verdict::element_name(p, "d_q", x), ref.out.d_q.get(x), dirty.out.d_q.get(x));
          }
        }
      }
      if (!bwd) continue;
      for (int64_t j = 0; j < p.n_k && !group_reached; ++j) {
        if (key_reached[size_t(j)]) continue;
        for (int64_t x = offset_kv(p, b, hk, j); x < offset_kv(p, b, hk, j) + p.d; ++x)
          for (const auto& [name, got, want] :
               {std::tuple{"d_k", &dirty.out.d_k, &ref.out.d_k}, std::tuple{"d_v", &dirty.out.d_v, &ref.out.d_v}})
            if (!same_bits(*got, *want, x))
              return fmt::format("{} of a key no poisoned row sees changed: {} became {}\n",
                                 verdict::element_name(p, name, x), want->get(x), got->get(x));
      }
    }
  return "";
}

// Does the law apply to this very case (its kernel, mask, dtype, sizes, regime)?
bool fits(const props::Law& law, const Kernel& k, const props::Case& c) {
  const Problem& p = c.in.p;
  if (law.id == "nan_blast" || !props::law_applies(law, k)) return false;  // blast radius: judged above
  if (law.needs_backward && !c.in.has_d_o()) return false;
  if (law.mask_none_only && p.mask != Mask::None) return false;
  if (law.needs_causal && p.mask == Mask::None) return false;
  if (!law.only_dtypes.empty() &&
      std::find(law.only_dtypes.begin(), law.only_dtypes.end(), p.dtype) == law.only_dtypes.end())
    return false;
  if (std::min(p.n_q, p.n_k) < law.min_n || p.d < law.min_d) return false;
  return std::find(law.regimes.begin(), law.regimes.end(), c.regime) != law.regimes.end();
}

}  // namespace

bool clean_inputs(Inputs& in) {
  bool any = false;
  for (HostTensor* t : {&in.q, &in.k, &in.v, &in.d_o}) any = cleaned(*t) || any;
  return any;
}

bool in_domain(const Kernel& k, const Inputs& in, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  const Problem& p = in.p;
  // Each tensor's largest magnitude, read in the same pass that finds a non-finite element.
  double mag[4] = {0, 0, 0, 0};  // q, k, v, d_o
  int which = 0;
  for (const HostTensor* t : {&in.q, &in.k, &in.v, &in.d_o}) {
    for (int64_t i = 0, end = t->numel(); !t->shape.empty() && i < end; ++i) {
      const double x = t->get(i);
      if (!certifiable(x)) return no("a non-finite input, or one past 2^500");
      mag[which] = std::max(mag[which], std::fabs(x));
    }
    ++which;
  }
  // The accumulation's range: fp32 (fp64 for fp64 storage); a 3-pass kernel's S, P and dS live in
  // the storage type.
  const double acc = p.dtype == DType::F64 ? std::numeric_limits<double>::max() : kFltMax;
  const double q = mag[0], kk = mag[1], v = mag[2], scale = std::fabs(p.scale);
  // Kernels take the scale in fp32 (as FlashAttention does): outside fp32's normal range it becomes
  // inf, 0 or a subnormal, and 0 * inf = NaN scores where the exact score is 0.
  if (p.dtype != DType::F64 && scale != 0 && (scale < 0x1p-126 || scale > 0x1p64))
    return no("a scale outside fp32's normal range");
  // Every partial sum of q.k (and of scale.q.k), in any order, finite in fp32 (generators.cpp's Huge).
  const double dot = double(p.d) * q * kk;
  if (dot * std::max(1.0, scale) > acc / 2) return no("partial sums of q.k past the accumulation's range");
  const double s_max = props::max_score_for(p.dtype, k.info.stores_s_p);
  if (scale * dot > s_max) return no(fmt::format("scores past {:.3g}", s_max));
  // The forward's unnormalised accumulator sums up to n_k weights <= 1 times v.
  if (double(p.n_k) * v > acc / 4) return no("n_k |v| past the accumulation's range");
  if (k.info.stores_s_p && v > max_finite(p.dtype) / 4) return no("v near the storage type's limit in a 3-pass kernel");
  if (!in.has_d_o()) return true;
  const double d_o = mag[3], limit = acc / 4;
  const double dp = double(p.d) * d_o * v;  // |d_o.v| and |D| = |d_o.o|
  const double rows = double(p.n_q) * (p.heads_q / p.heads_kv);
  if (2 * dp > limit) return no("d_o.v past the accumulation's range");
  // dS = P (dP - D) is rounded to a 16-bit storage type as the operand of the d_q and d_k GEMMs (the
  // tensor cores take it there; cpu_tiled emulates that): it must fit in it.
  if (dtype_size(p.dtype) == 2 && 2 * dp > max_finite(p.dtype) / 4) return no("dS past the storage type's range");
  // d_q = scale (dS k) and d_k = scale (dSᵀ q) accumulate dS k unscaled, as FlashAttention does: a
  // small scale does not keep the sums in range.
  const double sc = std::max(1.0, scale);
  if (sc * double(p.n_k) * 2 * dp * kk > limit || sc * rows * 2 * dp * q > limit || rows * d_o > limit)
    return no("gradient sums past the accumulation's range");
  return true;
}

Judgement judge_run(const Kernel& k, const props::Case& c, const verdict::Run& r, const verdict::Run* clean) {
  Judgement j;
  j.check = "structure";
  if (!r.error.empty()) return j.failure = r.error + "\n", j;
  j.failure = empty_rows(k, c.in, r.out);
  if (!j.ok()) return j;
  std::string why;
  if (!in_domain(k, c.in, &why)) {
    if (why.rfind("a non-finite", 0) != 0) return j;  // finite, beyond the error model: structure only
    j.check = "blast_radius";
    j.failure = blast_radius(k, c, r, clean);
    return j;
  }
  j.check = "reference";
  try {
    j.failure = verdict::check_outputs(k, c.in, r.out, verdict::oracle(k, c.in, c.cfg));
  } catch (const ref::OracleUnavailable& e) {  // bad usage, not the kernel's fault
    j.unavailable = e.what();
  } catch (const std::exception& e) {
    j.failure = fmt::format("threw: {}\n", e.what());
  }
  return j;
}

Judgement judge(const Kernel& k, const props::Case& c, uint64_t law_pick) {
  const bool bwd = c.in.has_d_o() && k.info.backward && bool(k.backward);
  Judgement j = judge_run(k, c, verdict::execute(k, c.in, c.cfg, bwd), nullptr);
  if (!j.ok() || j.check != "reference") return j;
  try {
    std::vector<const props::Law*> applicable;
    for (const props::Law& law : props::laws())
      if (fits(law, k, c)) applicable.push_back(&law);
    if (applicable.empty()) return j;
    const props::Law& law = *applicable[law_pick % applicable.size()];
    j.check = "reference+" + law.id;
    j.failure = law.check(k, c);
  } catch (const ref::OracleUnavailable& e) {
    j.unavailable = e.what();
  } catch (const std::exception& e) {
    j.failure = fmt::format("threw: {}\n", e.what());
  }
  return j;
}

}  // namespace fc::fuzz
