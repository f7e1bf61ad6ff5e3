// A variant problem drawn from a dense case for the laws that judge every problem against the
// reference (variant_gen.hpp, with_variants): each variant the kernel declares joins with
// probability one half, so the cases cover each variant alone and the variants together.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "properties/generators.hpp"
#include "properties/variant_gen.hpp"

namespace fc::props {

namespace {

// Columns of a (..., d) tensor cut or repeated to width w: the same values, so the regime carries.
HostTensor rewidth(const HostTensor& t, int64_t w) {
  std::vector<int64_t> shape = t.shape;
  const int64_t d = shape.back(), rows = t.numel() / d;
  shape.back() = w;
  HostTensor out(t.dtype, shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; ++c) out.set(r * w + c, t.get(r * d + (c % d)));
  return out;
}

}  // namespace

Inputs with_sinks(const Inputs& dense, Rng& rng, std::string* how) {
  Inputs in = dense;
  const ScoreStats st = score_stats(dense);
  const double top = std::isfinite(st.max_score) ? st.max_score : 0.0;
  const double spread = std::max(1.0, st.max_abs);
  in.p.sinks = true;
  in.sinks = HostTensor(DType::F32, {in.p.heads_q});
  std::vector<std::string> kinds;
  for (int64_t h = 0; h < in.p.heads_q; ++h) {
    double s = 0;
    switch (rng() % 5) {
      case 0: s = -std::numeric_limits<double>::infinity(), kinds.push_back("-inf"); break;
      case 1: s = top + std::log(double(std::max(in.p.n_k, 1))), kinds.push_back("top+log n"); break;
      case 2: s = top, kinds.push_back("top"); break;
      case 3: s = top + 4 * spread + 30, kinds.push_back("far above"); break;
      default: s = top - 4 * spread - 30, kinds.push_back("far below"); break;
    }
    in.sinks.set(h, std::isfinite(s) ? double(float(s)) : s);  // an fp32 logit
  }
  *how = fmt::format("sinks ({})", fmt::join(kinds, ", "));
  return in;
}

bool mask_size_ok(const Problem& p) {
  return !p.varlen && p.page_size == 0 && double(p.batch) * p.heads_q * p.n_q * double(p.n_k) <= double(1 << 22);
}

Inputs with_mask_tensor(const Inputs& dense, bool bool_ok, const std::vector<DType>& dtypes, Rng& rng,
                        std::string* how) {
  Inputs in = dense;
  Problem& p = in.p;
  // Additive two draws in three, F32 (the common dtype of a mask) in half of them when declared.
  const bool additive = !dtypes.empty() && (!bool_ok || rng() % 3 != 0);
  const bool f32 = std::find(dtypes.begin(), dtypes.end(), DType::F32) != dtypes.end() && rng() % 2;
  p.mask_kind = additive ? MaskKind::Additive : MaskKind::Bool;
  p.mask_dtype = additive ? (f32 ? DType::F32 : dtypes[rng() % dtypes.size()]) : DType::F32;
  const int64_t bm = rng() % 2 ? 1 : p.batch, hm = rng() % 2 ? 1 : p.heads_q;
  p.mask_b = int32_t(bm), p.mask_h = int32_t(hm);
  in.mask = HostTensor(additive ? p.mask_dtype : DType::BOOL, {bm, hm, p.n_q, p.n_k});
  const int64_t n_q = p.n_q, n_k = p.n_k;
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  std::string kind;
  const int pattern = int(rng() % 5);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double density = pattern == 0 ? 0.1 : pattern == 1 ? 0.5 : 0.9;
  for (int64_t bh = 0; bh < bm * hm; ++bh) {
    const int64_t pad = int64_t(rng() % uint64_t(n_k + 1));  // key padding: the first pad keys
    for (int64_t i = 0; i < n_q; ++i)
      for (int64_t j = 0; j < n_k; ++j) {
        bool on = true;
        switch (pattern) {
          case 3: on = rng() % 2 ? j <= i : j <= i + n_k - n_q; break;
          case 4: on = j < pad; break;
          default: on = unit(rng) < density;
        }
        double x = on ? 1.0 : 0.0;
        if (additive) {
          const int pick = int(rng() % 8);
          const double small = std::ldexp(double(int64_t(rng() % 33) - 16), -1);  // -8 .. 8 in halves
          // -1e9 only where the scores are not F16: a kernel storing S there would overflow to -inf.
          const double large =
              p.mask_dtype == DType::F32 && dtype_q(p) != DType::F16 && rng() % 2 ? -1e9 : (rng() % 2 ? -1e4 : -3e4);
          x = !on ? kNegInf : pick < 3 ? 0.0 : pick < 6 ? small : large;
        }
        in.mask.set((bh * n_q + i) * n_k + j, x);
      }
  }
  kind = pattern < 3 ? fmt::format("random density {}", density) : pattern == 3 ? "causal rows" : "key padding";
  bool empty_row = false;
  if (rng() % 2) {  // one row every key of which is hidden (in every broadcast slice)
    const int64_t i = int64_t(rng() % uint64_t(n_q));
    for (int64_t bh = 0; bh < bm * hm; ++bh)
      for (int64_t j = 0; j < n_k; ++j) in.mask.set((bh * n_q + i) * n_k + j, additive ? kNegInf : 0.0);
    empty_row = true;
  }
  *how = fmt::format("{} mask tensor [{}, {}, {}, {}] ({}{})", additive ? dtype_name(p.mask_dtype) : "boolean", bm, hm,
                     n_q, n_k, additive ? "0, -inf, small and large values; " + kind : kind,
                     empty_row ? "; a fully masked row" : "");
  return in;
}

Inputs with_block_mask(const Inputs& dense, Rng& rng, std::string* how) {
  Inputs in = dense;
  Problem& p = in.p;
  auto size = [&](int32_t n) {
    const int32_t pick[] = {1, 2, 3, 16, 64, 128, n};
    return std::max(1, pick[rng() % 7]);
  };
  p.block_q = size(p.n_q), p.block_k = size(p.n_k);
  const int64_t rows = (int64_t(p.n_q) + p.block_q - 1) / p.block_q;
  const int64_t cols = (int64_t(p.n_k) + p.block_k - 1) / p.block_k;
  const int64_t bm = rng() % 2 ? 1 : p.batch, hm = rng() % 2 ? 1 : p.heads_q;
  p.block_b = int32_t(bm), p.block_h = int32_t(hm);
  in.block_mask = HostTensor(DType::BOOL, {bm, hm, rows, cols});
  const uint64_t density = 1 + rng() % 3;  // in quarters
  for (int64_t x = 0; x < in.block_mask.numel(); ++x) in.block_mask.set(x, rng() % 4 < density ? 1.0 : 0.0);
  const bool empty_row = rng() % 2;
  if (empty_row) {
    const int64_t r = int64_t(rng() % uint64_t(rows));
    for (int64_t bh = 0; bh < bm * hm; ++bh)
      for (int64_t c = 0; c < cols; ++c) in.block_mask.set((bh * rows + r) * cols + c, 0.0);
  }
  *how = fmt::format("block mask [{}, {}, {}, {}] of {} x {} blocks, density {}/4{}", bm, hm, rows, cols, p.block_q,
                     p.block_k, density, empty_row ? ", a block row all false" : "");
  return in;
}

HostTensor dense_of_block_mask(const Inputs& in) {
  const Problem& p = in.p;
  const int64_t bm = in.block_mask.shape[0], hm = in.block_mask.shape[1];
  HostTensor out(DType::BOOL, {bm, hm, p.n_q, p.n_k});
  for (int64_t b = 0; b < bm; ++b)
    for (int64_t h = 0; h < hm; ++h)
      for (int64_t i = 0; i < p.n_q; ++i)
        for (int64_t j = 0; j < p.n_k; ++j)
          out.set(((b * hm + h) * p.n_q + i) * p.n_k + j,
                  in.block_mask.get(broadcast_index(in.block_mask, b, h, i / p.block_q, j / p.block_k)));
  return out;
}

int32_t draw_d_v(Rng& rng, int32_t d) {
  const int32_t pick[] = {1, std::max(1, d / 2), d + 1, d + 8, 2 * d, 3};
  int32_t w = pick[rng() % 6];
  return w == d ? d + 1 : w;
}

Inputs with_d_v(const Inputs& dense, int32_t d_v) {
  Inputs in = dense;
  in.p.d_v = d_v;
  in.v = rewidth(dense.v.contiguous(), d_v);
  if (dense.has_d_o()) in.d_o = rewidth(dense.d_o.contiguous(), d_v);
  return in;
}

Inputs with_variants(const Variants& have, const Inputs& dense, int32_t block_n, Rng& rng, std::string* how,
                     const std::vector<DType>& mask_dtypes, int64_t long_paged_work) {
  Inputs in = dense;
  Problem& p = in.p;
  std::vector<std::string> parts;
  if (have.window && rng() % 2) {
    draw_window(rng, std::max(p.n_q, p.n_k), std::max(block_n, 1), &p.window_left, &p.window_right);
    parts.push_back(fmt::format("window ({}, {})", p.window_left, p.window_right));
  }
  if (have.softcap && rng() % 2) {
    // Not below 2^-20: a cap far under fp32's normal range is no cap a kernel can hold.
    p.softcap = std::max(draw_softcap(rng, score_stats(dense).max_abs), 0x1p-20);
    parts.push_back(fmt::format("softcap {:.9g}", p.softcap));
  }
  if (have.alibi && rng() % 2) {
    p.alibi = true;
    in.alibi_slopes = HostTensor(DType::F32, {p.heads_q});
    // The ALiBi paper's geometric slopes 2^(-8 (h + 1) / H), sometimes scaled up to steep ones.
    const double steep = rng() % 4 == 0 ? 16.0 : 1.0;
    for (int64_t h = 0; h < p.heads_q; ++h)
      in.alibi_slopes.set(h, steep * std::exp2(-8.0 * double(h + 1) / double(p.heads_q)));
    parts.push_back(fmt::format("ALiBi slopes x{}", steep));
  }
  if (have.d_v && rng() % 2) {
    in = with_d_v(in, draw_d_v(rng, p.d));
    parts.push_back(fmt::format("d_v {}", in.p.d_v));
  }
  if (have.varlen && rng() % 2) {
    const SeqLens lens = draw_lengths(rng, in.p.batch, in.p.n_q, in.p.n_k);
    in = to_varlen(in, lens);
    parts.push_back(describe(lens));
    if (have.paged && rng() % 2) {
      std::string paged;
      // One in eight paged problems is long (to_long_paged), drawn from a generator of its own (seeded
      // from a copy of rng) so that the draws after this one stay as they were.
      Rng copy = rng;
      Rng side(copy() ^ 0x5851f42d4c957f2dull);
      const Inputs before = in;
      in = to_paged(in, draw_page_size(rng), true, rng, &paged);
      if (side() % 8 == 0) {  // its own lengths: the long description replaces the varlen one
        in = to_long_paged(before, side, &paged, long_paged_work);
        parts.pop_back();
      }
      parts.push_back(paged);
    }
  }
  if (have.strides && rng() % 4 == 0) {
    std::string s = "strided q: ";
    in.q = draw_strided(in.q, rng, &s);
    parts.push_back(s);
  }
  // Sinks last, so that the draws above are those of a kernel without sinks; drawn from the dense
  // case's scores (a sink is one logit per head whatever the layout).
  if (have.sinks && rng() % 2) {
    std::string s;
    const Inputs sunk = with_sinks(dense, rng, &s);
    in.p.sinks = true, in.sinks = sunk.sinks;
    parts.push_back(s);
  }
  // Padded offsets after every other draw (the draws above stay those of a kernel without them), on an
  // unpaged varlen batch whose q is compact.
  if (have.padded && p.varlen && !is_paged(p) && rng() % 2 && in.q.is_compact()) {
    SeqLens lens;
    for (int64_t b = 0; b < in.p.batch; ++b)
      lens.q.push_back(int32_t(in.cu_seqlens_q.get(b + 1) - in.cu_seqlens_q.get(b))),
          lens.k.push_back(int32_t(in.cu_seqlens_k.get(b + 1) - in.cu_seqlens_k.get(b)));
    const Padding pad = draw_padding(rng, lens);
    in = to_padded(in, pad, rng);
    parts.push_back(describe(pad));
  }
  // Mask tensors (three draws in four) and block masks last (dense problems, masks of at most 2^22
  // elements).
  const bool additive = have.mask_additive && !mask_dtypes.empty();
  if ((have.mask_bool || additive) && mask_size_ok(in.p) && rng() % 4 != 0) {
    std::string s;
    const Inputs m = with_mask_tensor(in, have.mask_bool, additive ? mask_dtypes : std::vector<DType>{}, rng, &s);
    in.p.mask_kind = m.p.mask_kind, in.p.mask_dtype = m.p.mask_dtype, in.mask = m.mask;
    in.p.mask_b = m.p.mask_b, in.p.mask_h = m.p.mask_h;
    parts.push_back(s);
  }
  if (have.block_mask && mask_size_ok(in.p) && rng() % 2) {
    std::string s;
    const Inputs m = with_block_mask(in, rng, &s);
    in.p.block_q = m.p.block_q, in.p.block_k = m.p.block_k, in.block_mask = m.block_mask;
    in.p.block_b = m.p.block_b, in.p.block_h = m.p.block_h;
    parts.push_back(s);
  }
  *how = parts.empty() ? "dense" : fmt::format("{}", fmt::join(parts, "; "));
  return in;
}

}  // namespace fc::props
