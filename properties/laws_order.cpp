// Laws about order and tiling: block size, key/value permutation, query permutation. Each holds two
// runs of one kernel to each other, never to the reference: bit for bit where the kernel declares
// the transform exact for its arithmetic (KernelInfo::exact), within the differential bound of what
// the two runs do not share otherwise (properties/differential.hpp), and each run within its
// certified bound where the kernel declares neither exactness nor its arithmetic.
#include <fmt/format.h>

#include <random>

#include "properties/differential.hpp"
#include "properties/evidence.hpp"
#include "properties/laws.hpp"
#include "verdict/verdict.hpp"

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

// A permutation that keeps every row within its block of `block` rows (the last block may be short).
std::vector<int64_t> block_permutation(int64_t n, int64_t block, std::mt19937_64& rng) {
  std::vector<int64_t> pi(static_cast<size_t>(n));  // (n,)
  for (int64_t r0 = 0; r0 < n; r0 += block) {
    const int64_t len = std::min(block, n - r0);
    const std::vector<int64_t> local = permutation(len, rng);
    for (int64_t r = 0; r < len; ++r) pi[size_t(r0 + r)] = r0 + local[size_t(r)];
  }
  return pi;
}

// out[g, pi_g(r), :] = in[g, r, :] for a (groups, n, width) tensor, one permutation per group; or the
// inverse (out[g, r, :] = in[g, pi_g(r), :]).
HostTensor permute_rows(const HostTensor& in, int64_t n, int64_t width, const std::vector<std::vector<int64_t>>& perms,
                        bool inverse = false) {
  HostTensor out = in;
  const int64_t sz = dtype_size(in.dtype);
  for (size_t g = 0; g < perms.size(); ++g)
    for (int64_t r = 0; r < n; ++r) {
      const int64_t a = (int64_t(g) * n + r) * width, b = (int64_t(g) * n + perms[g][size_t(r)]) * width;
      std::memcpy(out.bytes.data() + (inverse ? a : b) * sz, in.bytes.data() + (inverse ? b : a) * sz,
                  size_t(width * sz));
    }
  return out;
}

// Gradients of two runs whose terms are the same and only summed in another order: d_q bit for bit
// where the kernel's d_q rows are exact, else within the order tolerance; d_k, d_v within it.
std::string gradients_reordered(const Kernel& k, const Inputs& in, const Config& cfg, const Outputs& a,
                                const Outputs& b) {
  const Problem& p = in.p;
  const GradientTolerance t = gradient_order_difference(k, in, cfg, a, b);
  std::string msg = k.info.exact.d_q_rows ? same_bits(p, "d_q", a.d_q, b.d_q)
                                          : within(p, "d_q", b.d_q.to_f64(), a.d_q.to_f64(), t.d_q, dtype_q(p));
  return msg + within(p, "d_k", b.d_k.to_f64(), a.d_k.to_f64(), t.d_k, dtype_kv(p)) +
         within(p, "d_v", b.d_v.to_f64(), a.d_v.to_f64(), t.d_v, dtype_kv(p));
}

// The forward of two runs on the same scores within both runs' unshared errors.
std::string forward_within(const Kernel& k, const Inputs& in, const Config& ca, const Outputs& a, const Config& cb,
                           const Outputs& b, Shared shared) {
  const Problem& p = in.p;
  const ref::Certified ref = certify(in);
  // One config for both runs (the permutation laws): the same tolerance twice, and t + t is exact.
  const bool same = ca.block_m == cb.block_m && ca.block_n == cb.block_n && ca.order == cb.order &&
                    ca.accum == cb.accum && ca.deterministic == cb.deterministic && ca.splits == cb.splits;
  const ForwardTolerance ta = forward_unshared(k, in, ref, ca, shared);
  const ForwardTolerance t = ta + (same ? ta : forward_unshared(k, in, ref, cb, shared));
  std::string msg = within(p, "o", b.o.to_f64(), a.o.to_f64(), t.o, dtype_o(p));
  if (k.info.writes_lse) msg += within(p, "lse", b.lse.to_f64(), a.lse.to_f64(), t.lse, DType::F32);
  return msg;
}

// Both runs of a permutation law within their certified bounds (a kernel that declares neither
// exactness nor its arithmetic: nothing is known to be computed alike in the two runs, so no sharper
// claim on their difference is sound; the difference is then within the sum of the two bounds).
std::string both_within_reference(const Kernel& k, const Inputs& a_in, const Run& a, const Inputs& b_in, const Run& b,
                                  const Config& cfg, const char* what) {
  std::string msg = check_outputs(k, a_in, a.out, oracle(k, a_in, cfg));
  if (!msg.empty()) return "the unpermuted run: " + msg;
  msg = check_outputs(k, b_in, b.out, oracle(k, b_in, cfg));
  return msg.empty() ? "" : fmt::format("the run with {} permuted: {}", what, msg);
}

// The second config of the block-size law: the case's, or (half the cases, from aux) the first
// config with another kBlockM only, where the kernel offers one: a row-exact kernel then gives the
// same bits.
Config second_config(const Kernel& k, const Case& c) {
  if (c.aux % 2 == 0) return c.cfg2;
  const Config& a = c.cfg;
  if (k.info.any_tile) {
    Config b = a;
    b.block_m = 1 + int32_t((c.aux / 2) % 17);
    if (b.block_m == a.block_m) b.block_m = b.block_m % 17 + 1;
    return b;
  }
  for (const Config& b : k.info.configs)
    if (b.block_n == a.block_n && b.order == a.order && b.accum == a.accum && b.splits == a.splits &&
        b.block_m != a.block_m)
      return b;
  return c.cfg2;
}

std::string law_block_size(const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  const Config cfg2 = second_config(k, c);
  const bool bwd = has_backward(k, c);
  note_transform(fmt::format("second config: block_m={} block_n={} order={}", cfg2.block_m, cfg2.block_n,
                             cfg2.order == LoopOrder::FA1 ? "FA1" : "FA2"));
  const Run a = execute(k, c.in, c.cfg, bwd), b = execute(k, c.in, cfg2, bwd);
  if (const std::string e = run_errors(a, b); !e.empty()) return e;
  // Only kBlockM differs: every row's arithmetic is the same, except in the FA1 order under a mask,
  // where a row renormalises at every key tile its query tile visits, which kBlockM decides.
  const bool same_keys = c.cfg.block_n == cfg2.block_n && c.cfg.order == cfg2.order && c.cfg.accum == cfg2.accum &&
                         c.cfg.splits == cfg2.splits && (c.cfg.order == LoopOrder::FA2 || p.mask == Mask::None);
  if (same_keys && k.info.exact.rows) {
    std::string msg = same_bits(p, "o", a.out.o, b.out.o);
    if (k.info.writes_lse) msg += same_bits(p, "lse", a.out.lse, b.out.lse);
    if (bwd && msg.empty()) msg += gradients_reordered(k, c.in, c.cfg, a.out, b.out);
    return msg;
  }
  if (!k.info.exact.shared_scores) throw NotApplicable("the key tiles differ and the kernel declares no shared scores");
  return forward_within(k, c.in, c.cfg, a.out, cfg2, b.out, Shared::Scores);
}

// Keys and values permuted together: within their tiles of kBlockN (a quarter of the cases, where the
// kernel declares tile_weights: every weight is shared, only the sums' order differs) or anywhere
// (the scores are shared: declared, or implied by a declared arithmetic, whose score is one chain over
// d fixed by the declaration, whatever the key's position). A kernel that declares neither has each
// run held to its certified bound.
std::string law_kv_permutation(const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  std::mt19937_64 rng(c.aux);
  const bool in_tiles = k.info.exact.tile_weights && (c.aux % 4 == 0 || !k.info.exact.shared_scores);
  const bool shared = k.info.exact.tile_weights || k.info.exact.shared_scores || bool(k.info.arithmetic);
  const int64_t block_n = ref::coarse(precision_of(k, c.cfg, p)).block_n;
  const int64_t tile = in_tiles && block_n > 0 ? block_n : p.n_k;
  std::vector<std::vector<int64_t>> perms;
  for (int64_t g = 0; g < p.batch * p.heads_kv; ++g) perms.push_back(block_permutation(p.n_k, tile, rng));
  Inputs in2 = c.in;
  in2.k = permute_rows(c.in.k, p.n_k, p.d, perms), in2.v = permute_rows(c.in.v, p.n_k, p.d, perms);
  note_problem("permuted keys' problem", in2);
  for (size_t g = 0; g < perms.size(); ++g)
    note_transform(fmt::format("keys of (batch {}, kv head {}) permuted {}: {}", int64_t(g) / p.heads_kv,
                               int64_t(g) % p.heads_kv, in_tiles ? "within their tiles" : "anywhere",
                               list_values(perms[g])));
  const Run a = execute(k, c.in, c.cfg, false), b = execute(k, in2, c.cfg, false);
  if (const std::string e = run_errors(a, b); !e.empty()) return e;
  if (!shared) return both_within_reference(k, c.in, a, in2, b, c.cfg, "keys");
  const std::string msg =
      forward_within(k, c.in, c.cfg, a.out, c.cfg, b.out, in_tiles ? Shared::Weights : Shared::Scores);
  return msg.empty() ? "" : fmt::format("keys permuted {}: {}", in_tiles ? "within their tiles" : "anywhere", msg);
}

// Queries (and d_o) permuted: a row-exact kernel permutes o, lse (and d_q) bit for bit; d_k and d_v
// are the same terms summed in another order. A kernel that declares its arithmetic but not exact rows
// computes each row's scores alike in both runs (one declared chain over d): o and lse within the
// differential bound of shared scores, and where they came out bit for bit the same, the gradients'
// terms are the same too (P from the same scores and lse, D from the same o), so the gradients are
// held to the order tolerance; otherwise each run's gradients to their certified bounds. A kernel
// that declares neither has each run held to its certified bound.
std::string law_q_permutation(const Kernel& k, const Case& c) {
  const Problem& p = c.in.p;
  const bool bwd = has_backward(k, c);
  std::mt19937_64 rng(c.aux);
  std::vector<std::vector<int64_t>> perms;
  for (int64_t g = 0; g < p.batch * p.heads_q; ++g) perms.push_back(permutation(p.n_q, rng));
  Inputs in2 = c.in;
  in2.q = permute_rows(c.in.q, p.n_q, p.d, perms);
  if (c.in.has_d_o()) in2.d_o = permute_rows(c.in.d_o, p.n_q, p.d, perms);
  note_problem("permuted queries' problem", in2);
  for (size_t g = 0; g < perms.size(); ++g)
    note_transform(fmt::format("queries of (batch {}, head {}) permuted: {}", int64_t(g) / p.heads_q,
                               int64_t(g) % p.heads_q, list_values(perms[g])));
  const Run a = execute(k, c.in, c.cfg, bwd), b = execute(k, in2, c.cfg, bwd);
  if (const std::string e = run_errors(a, b); !e.empty()) return e;
  Outputs back = b.out;  // the second run's query-shaped outputs, back in the first run's order
  back.o = permute_rows(b.out.o, p.n_q, p.d, perms, true);
  back.lse = permute_rows(b.out.lse, p.n_q, 1, perms, true);
  if (bwd) back.d_q = permute_rows(b.out.d_q, p.n_q, p.d, perms, true);
  if (k.info.exact.rows) {
    std::string msg = same_bits(p, "o", a.out.o, back.o);
    if (k.info.writes_lse) msg += same_bits(p, "lse", a.out.lse, back.lse);
    if (bwd && msg.empty()) msg += gradients_reordered(k, c.in, c.cfg, a.out, back);
    return msg;
  }
  if (!k.info.arithmetic) return both_within_reference(k, c.in, a, in2, b, c.cfg, "queries");
  const std::string msg = forward_within(k, c.in, c.cfg, a.out, c.cfg, back, Shared::Scores);
  if (!msg.empty() || !bwd) return msg;
  const bool same_forward = a.out.o.bytes == back.o.bytes && (!k.info.writes_lse || a.out.lse.bytes == back.lse.bytes);
  if (same_forward) return gradients_reordered(k, c.in, c.cfg, a.out, back);
  return both_within_reference(k, c.in, a, in2, b, c.cfg, "queries");
}

std::string needs_shared(const KernelInfo& i) {
  return i.exact.rows || i.exact.shared_scores ? "" : "needs exact rows or shared scores";
}

}  // namespace

void add_order_laws(std::vector<Law>& out) {
  using R = Regime;
  out.push_back({.id = "block_size",
                 .sentence = "block size never changes the answer beyond the bound",
                 .regimes = {R::Normal, R::Outliers, R::Ties, R::FullyMasked, R::FarBelow},
                 .backward = true,
                 .needs_tiles = true,
                 .needs_exact = needs_shared,
                 .check = law_block_size});
  out.push_back({.id = "kv_permutation",
                 .sentence = "permuting keys and values together changes nothing",
                 .regimes = {R::Normal, R::Outliers, R::Ties, R::FarBelow, R::Huge},
                 .mask_none_only = true,
                 .check = law_kv_permutation});
  out.push_back({.id = "q_permutation",
                 .sentence = "permuting queries permutes the outputs",
                 .regimes = {R::Normal, R::Outliers, R::Ties, R::FarBelow},
                 .backward = true,
                 .mask_none_only = true,
                 .check = law_q_permutation});
}

}  // namespace fc::props
