// Metamorphic laws: a transformed input whose exact answer is known from the original's. Every
// transform is exact in the storage dtype (DESIGN §5): grid values, power-of-two scalings,
// permutations; each side is held to its own bound, never a widened one.
#include <fmt/format.h>

#include <cmath>
#include <random>

#include "properties/execute.hpp"
#include "properties/laws.hpp"

namespace fc::props {
namespace {

// Fisher-Yates with an explicit draw, so a permutation replays identically on every standard
// library (std::shuffle's algorithm is unspecified).
std::vector<int64_t> permutation(int64_t n, std::mt19937_64& rng) {
  std::vector<int64_t> pi(static_cast<size_t>(n));  // (n,) row r moves to pi[r]
  for (int64_t r = 0; r < n; ++r) pi[size_t(r)] = r;
  for (int64_t r = n - 1; r > 0; --r) std::swap(pi[size_t(r)], pi[size_t(rng() % uint64_t(r + 1))]);
  return pi;
}

// out[b, h, pi(r), :] = in[b, h, r, :] for a (batch, heads, n, width) tensor; a fresh pi per (b, h).
// perms records them so the inverse can be applied to outputs.
template <class V>
V permute_rows(const V& in, int64_t bh, int64_t n, int64_t width, const std::vector<std::vector<int64_t>>& perms) {
  V out = in;
  for (int64_t g = 0; g < bh; ++g)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t x = 0; x < width; ++x) {
        const int64_t from = (g * n + r) * width + x, to = (g * n + perms[size_t(g)][size_t(r)]) * width + x;
        if constexpr (std::is_same_v<V, HostTensor>)
          out.set(to, in.get(from));
        else
          out[size_t(to)] = in[size_t(from)];
      }
  return out;
}

std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b, double fb = 1) {
  std::vector<double> s(a.size());
  for (size_t x = 0; x < s.size(); ++x) s[x] = a[x] + fb * b[x];
  return s;
}

struct Side {
  Run run;
  ref::Bounds bounds;
};
Side side(const Kernel& k, const Inputs& in, const Config& cfg, bool bwd) {
  Side s{execute(k, in, cfg, bwd), {}};
  if (s.run.error.empty()) s.bounds = bounds_for(k, in, cfg, certify(in));
  return s;
}

// Keys and values permuted together (perm_kv) or queries and d_o permuted (!perm_kv).
std::string law_permutation(const Kernel& k, const Case& c, bool perm_kv) {
  const Problem& p = c.in.p;
  const bool bwd = has_backward(k, c);
  std::mt19937_64 rng(c.aux);
  const int64_t bh = p.batch * (perm_kv ? p.heads_kv : p.heads_q), n = perm_kv ? p.n_k : p.n_q;
  std::vector<std::vector<int64_t>> perms;
  for (int64_t g = 0; g < bh; ++g) perms.push_back(permutation(n, rng));
  Inputs in2 = c.in;
  if (perm_kv) {
    in2.k = permute_rows(c.in.k, bh, n, p.d, perms), in2.v = permute_rows(c.in.v, bh, n, p.d, perms);
  } else {
    in2.q = permute_rows(c.in.q, bh, n, p.d, perms);
    if (c.in.has_d_o()) in2.d_o = permute_rows(c.in.d_o, bh, n, p.d, perms);
  }
  const Side a = side(k, c.in, c.cfg, bwd), b = side(k, in2, c.cfg, bwd);
  if (!a.run.error.empty() || !b.run.error.empty()) return a.run.error + b.run.error;
  // Bring the first run's outputs (and bounds) to the second's order; the rest compare as they are.
  auto moved = [&](const HostTensor& t, const std::vector<double>& bd, int64_t width) {
    return std::pair{permute_rows(t, bh, n, width, perms), permute_rows(bd, bh, n, width, perms)};
  };
  std::string msg;
  auto cmp = [&](const char* name, const HostTensor& t1, const std::vector<double>& b1, const HostTensor& t2,
                 const std::vector<double>& b2, bool is_moved, int64_t width) {
    if (!is_moved) return msg += agree(p, name, t2, t1, b2, b1), void();
    const auto [t1m, b1m] = moved(t1, b1, width);
    msg += agree(p, name, t2, t1m, b2, b1m);
  };
  cmp("o", a.run.out.o, a.bounds.o, b.run.out.o, b.bounds.o, !perm_kv, p.d);
  if (k.info.writes_lse) cmp("lse", a.run.out.lse, a.bounds.lse, b.run.out.lse, b.bounds.lse, !perm_kv, 1);
  if (bwd) {
    cmp("d_q", a.run.out.d_q, a.bounds.d_q, b.run.out.d_q, b.bounds.d_q, !perm_kv, p.d);
    cmp("d_k", a.run.out.d_k, a.bounds.d_k, b.run.out.d_k, b.bounds.d_k, perm_kv, p.d);
    cmp("d_v", a.run.out.d_v, a.bounds.d_v, b.run.out.d_v, b.bounds.d_v, perm_kv, p.d);
  }
  return msg;
}

double grid_value(std::mt19937_64& rng) { return double(int64_t(rng() % 63) - 31) / 8; }  // k/8, |k| <= 31

std::string law_shift(const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  std::mt19937_64 rng(c.aux);
  Inputs in2 = c.in;
  std::vector<double> w(static_cast<size_t>(p.batch * p.heads_kv * p.d));  // (batch, heads_kv, d): one w per kv head
  for (double& x : w) x = grid_value(rng);
  for (int64_t x = 0; x < in2.k.numel(); ++x) {
    const int64_t head = x / (p.n_k * p.d), col = x % p.d;
    const double y = c.in.k.get(x) + w[size_t(head * p.d + col)];
    if (round_to(p.dtype, y) != y) throw NotApplicable("the shifted keys are not exact in the storage type");
    in2.k.set(x, y);
  }
  const bool bwd = has_backward(k, c);
  const Side a = side(k, c.in, c.cfg, bwd), b = side(k, in2, c.cfg, bwd);
  if (!a.run.error.empty() || !b.run.error.empty()) return a.run.error + b.run.error;
  std::string msg = agree(p, "o", b.run.out.o, a.run.out.o, b.bounds.o, a.bounds.o);
  if (k.info.writes_lse) {
    // lse moves by the row's shift scale * q_i . w, exact in fp64 on the grid up to the scale's
    // multiply and the subtraction (each one fp64 rounding, added to the bound).
    std::vector<double> lse2 = b.run.out.lse.to_f64(), tol = plus(a.bounds.lse, b.bounds.lse);
    for (int64_t b_ = 0; b_ < p.batch; ++b_)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < p.n_q; ++i) {
          double qw = 0;
          for (int64_t x = 0; x < p.d; ++x)
            qw +=
                c.in.q.get(offset_q(p, b_, h, i) + x) * w[size_t((b_ * p.heads_kv + kv_head(p, int32_t(h))) * p.d + x)];
          const size_t row = size_t(offset_lse(p, b_, h, i));
          tol[row] += 0x1p-52 * (std::fabs(p.scale * qw) + std::fabs(lse2[row]));
          lse2[row] -= p.scale * qw;
        }
    msg += within(p, "lse", lse2, a.run.out.lse.to_f64(), tol, DType::F32);
  }
  if (bwd)
    msg += agree(p, "d_q", b.run.out.d_q, a.run.out.d_q, b.bounds.d_q, a.bounds.d_q) +
           agree(p, "d_k", b.run.out.d_k, a.run.out.d_k, b.bounds.d_k, a.bounds.d_k) +
           agree(p, "d_v", b.run.out.d_v, a.run.out.d_v, b.bounds.d_v, a.bounds.d_v);
  return msg;
}

std::string law_affine_v(const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  std::mt19937_64 rng(c.aux);
  const double a = (rng() % 2 ? -1.0 : 1.0) * std::ldexp(1.0, int(rng() % 3) - 1);  // +-1/2, +-1, +-2
  std::vector<double> shift(static_cast<size_t>(p.d));                              // (d,) b: one offset per column
  for (double& x : shift) x = grid_value(rng);
  Inputs in2 = c.in;
  for (int64_t x = 0; x < in2.v.numel(); ++x) {
    const double y = a * c.in.v.get(x) + shift[size_t(x % p.d)];
    if (round_to(p.dtype, y) != y) throw NotApplicable("aV + b is not exact in the storage type");
    in2.v.set(x, y);
  }
  const bool bwd = has_backward(k, c);
  const Side s1 = side(k, c.in, c.cfg, bwd), s2 = side(k, in2, c.cfg, bwd);
  if (!s1.run.error.empty() || !s2.run.error.empty()) return s1.run.error + s2.run.error;
  std::vector<double> expected = s1.run.out.o.to_f64(), tol = plus(s2.bounds.o, s1.bounds.o, std::fabs(a));
  for (int64_t x = 0; x < numel_q(p); ++x) {
    const bool empty_row = n_visible(p.mask, x / p.d % p.n_q, p.n_q, p.n_k) == 0;  // o = 0 by contract
    expected[size_t(x)] = empty_row ? 0.0 : a * expected[size_t(x)] + shift[size_t(x % p.d)];
    tol[size_t(x)] += 0x1p-53 * std::fabs(expected[size_t(x)]);  // the fp64 a*o + b, one rounding
  }
  std::string msg = within(p, "o", s2.run.out.o.to_f64(), expected, tol, p.dtype);
  if (k.info.writes_lse) msg += agree(p, "lse", s2.run.out.lse, s1.run.out.lse, s2.bounds.lse, s1.bounds.lse);
  if (bwd) {  // dS scales by a: d_q, d_k scale by a; d_v = P^T d_o does not see V
    auto scaled = [&](const char* name, const HostTensor& t2, const HostTensor& t1, const std::vector<double>& b2,
                      const std::vector<double>& b1) {
      std::vector<double> e = t1.to_f64();
      for (double& x : e) x *= a;  // a power of two: exact
      return within(p, name, t2.to_f64(), e, plus(b2, b1, std::fabs(a)), p.dtype);
    };
    msg += scaled("d_q", s2.run.out.d_q, s1.run.out.d_q, s2.bounds.d_q, s1.bounds.d_q) +
           scaled("d_k", s2.run.out.d_k, s1.run.out.d_k, s2.bounds.d_k, s1.bounds.d_k) +
           agree(p, "d_v", s2.run.out.d_v, s1.run.out.d_v, s2.bounds.d_v, s1.bounds.d_v);
  }
  return msg;
}

}  // namespace

void add_metamorphic_laws(std::vector<Law>& out) {
  using R = Regime;
  out.push_back({.id = "shift",
                 .sentence = "adding a constant vector to every key changes nothing",
                 .regimes = {R::Grid},
                 .backward = true,
                 .check = law_shift});
  out.push_back({.id = "kv_permutation",
                 .sentence = "permuting keys and values together changes nothing",
                 .regimes = {R::Normal, R::Outliers, R::Ties},
                 .backward = true,
                 .mask_none_only = true,
                 .check = [](const Kernel& k, const Case& c) { return law_permutation(k, c, true); }});
  out.push_back({.id = "q_permutation",
                 .sentence = "permuting queries permutes the outputs",
                 .regimes = {R::Normal, R::Outliers, R::Ties},
                 .backward = true,
                 .mask_none_only = true,
                 .check = [](const Kernel& k, const Case& c) { return law_permutation(k, c, false); }});
  out.push_back({.id = "affine_v",
                 .sentence = "O(aV + b) = aO + b",
                 .regimes = {R::Grid},
                 .backward = true,
                 .check = law_affine_v});
}

}  // namespace fc::props
