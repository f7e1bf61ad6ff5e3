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

Inputs with_variants(const Variants& have, const Inputs& dense, int32_t block_n, Rng& rng, std::string* how) {
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
        in = to_long_paged(before, side, &paged);
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
  *how = parts.empty() ? "dense" : fmt::format("{}", fmt::join(parts, "; "));
  return in;
}

}  // namespace fc::props
