// The variants' laws (contract v2, docs/laws.md): each derives its variant structure from a dense
// case and its seed (variant_gen.hpp), so the value regimes, shapes and tiles of the dense generator
// carry over, and holds two runs of the kernel to the same bits or one run to an exact criterion.
// Bitwise gradients are asked of kernels that declare deterministic d_q rows (KernelInfo::exact).
// Every problem a law derives passes the gate generated cases pass (claims(), supports() included;
// execute() throws NotApplicable on a declined one): a declined varlen batch, paged batch or its
// contiguous twin, zero_length's batch with or without its inserted sequences, a strided relayout or
// a zero-slope ALiBi problem leaves the law nothing to compare, so the case is discarded; varlen_split
// compares each sequence the kernel takes alone and leaves out those it declines (discarded when it
// declines every one).
#include <fmt/format.h>

#include <limits>

#include "properties/evidence.hpp"
#include "properties/variant_compare.hpp"
#include "properties/variant_gen.hpp"

namespace fc::props {
namespace {

std::string law_varlen_split(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  Rng rng(c.aux);
  const SeqLens lens = draw_lengths(rng, c.in.p.batch, c.in.p.n_q, c.in.p.n_k);
  const Inputs batch = to_varlen(c.in, lens);
  note_problem("varlen batch", batch);
  note_transform("sequence lengths " + describe(lens));
  const bool g = grads(k, c);
  const Run all = execute(k, batch, c.cfg, g);
  if (!all.error.empty()) return "the kernel threw: " + all.error;
  int compared = 0, declined = 0;
  for (int64_t b = 0; b < batch.p.batch; ++b) {
    if (lens.q[size_t(b)] == 0 || lens.k[size_t(b)] == 0) continue;  // the zero_length law's part
    const Inputs one_in = dense_sequence(batch, b);
    if (!claims(k, one_in)) {  // a sequence the kernel declines alone is not compared; the others are
      ++declined;
      continue;
    }
    const Run one = execute(k, one_in, c.cfg, g);
    if (!one.error.empty()) return "the kernel threw: " + one.error;
    const std::string m = same_sequence(batch, all.out, b, one_in, one.out, 0, g, true);
    if (!m.empty()) return fmt::format("{}; sequence {} of the batch against its own run: {}", describe(lens), b, m);
    ++compared;
  }
  if (compared == 0 && declined > 0)
    throw NotApplicable(fmt::format("{}: the kernel declines every sequence run alone", describe(lens)));
  return "";
}

std::string law_paged(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  Rng rng(c.aux);
  const SeqLens lens = draw_lengths(rng, c.in.p.batch, c.in.p.n_q, c.in.p.n_k);
  std::string how;
  Inputs paged = to_paged(to_varlen(c.in, lens), draw_page_size(rng), true, rng, &how);
  // A quarter of the cases long (variant_gen.hpp, to_long_paged: up to 512 pages, > 4096 keys, page
  // indices >= 2^15, tables past 2^16 entries), from a generator of their own; no oracle judges them,
  // so a GPU kernel's take the GPU cap.
  Rng side(c.aux ^ 0x2545f4914f6cdd1dull);
  const bool long_paged = side() % 4 == 0;
  if (long_paged) paged = to_long_paged(c.in, side, &how, k.info.device != "cpu" ? kLongPagedWorkGpu : kLongPagedWork);
  const std::string what = long_paged ? how : describe(lens) + "; " + how;
  const Inputs flat = unpaged(paged);
  note_problem("paged batch", paged);
  note_problem("contiguous batch", flat);
  note_transform(what);
  const bool g = grads(k, c);
  const Run a = execute(k, paged, c.cfg, g), b = execute(k, flat, c.cfg, g);
  if (std::string e = both_ran(a, b); !e.empty()) return e;
  const Problem& p = paged.p;
  std::string m = same_bits(p, "o", a.out.o, b.out.o) + same_bits(p, "lse", a.out.lse, b.out.lse);
  if (g) m += same_bits(p, "d_q", a.out.d_q, b.out.d_q);
  // d_k, d_v: a slot one key reads carries that key's gradient, a slot none reads 0; a shared
  // slot's is a sum (not compared).
  const std::vector<int32_t> reads = slot_reads(paged);
  const Seqs seqs = paged.seqs();
  for (int64_t s = 0; g && m.empty() && s < int64_t(reads.size()); ++s)
    for (int64_t h = 0; h < p.heads_kv && reads[size_t(s)] == 0; ++h)
      for (int64_t x = 0; x < p.d; ++x)
        if (a.out.d_k.get((s * p.heads_kv + h) * p.d + x) != 0)
          m = fmt::format("d_k of page slot {} (no sequence reads it) is {:.9g}, not 0\n", s,
                          a.out.d_k.get((s * p.heads_kv + h) * p.d + x));
  for (int64_t bb = 0; g && m.empty() && bb < p.batch; ++bb) {
    bool shared = false;
    for (int64_t j = 0; j < seq_n_k(p, seqs, bb); ++j)
      shared |= reads[size_t(kv_row(p, seqs, bb, 0, j) / p.heads_kv)] > 1;
    if (!shared) m = same_sequence(paged, a.out, bb, flat, b.out, bb, true, true);
  }
  return m.empty() ? "" : fmt::format("{}; paged against contiguous: {}", what, m);
}

// Padded varlen (contract v3): the sequences at padded offsets, padding between them (NaN when the
// kernel runs: kernels/hostile.hpp; canaries on the outputs' padding tokens), give the bits of the same
// sequences packed end to end: o, lse, and with gradients d_q and each sequence's d_k, d_v rows.
std::string law_padded_varlen(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  Rng rng(c.aux);
  const SeqLens lens = draw_lengths(rng, c.in.p.batch, c.in.p.n_q, c.in.p.n_k);
  const Inputs compact = to_varlen(c.in, lens);
  const Padding pad = draw_padding(rng, lens);
  const Inputs padded = to_padded(compact, pad, rng);
  note_problem("padded varlen batch", padded);
  note_problem("compact varlen batch", compact);
  note_transform(describe(lens) + "; " + describe(pad));
  const bool g = grads(k, c);
  const Run a = execute(k, padded, c.cfg, g), b = execute(k, compact, c.cfg, g);
  if (std::string e = both_ran(a, b); !e.empty()) return e;
  for (int64_t s = 0; s < padded.p.batch; ++s)
    if (std::string m = same_sequence(padded, a.out, s, compact, b.out, s, g, true); !m.empty())
      return fmt::format("{}; {}; sequence {} padded against compact: {}", describe(lens), describe(pad), s, m);
  return "";
}

std::string law_strides(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  Rng rng(c.aux);
  Inputs plain = c.in;
  std::string how = "dense; ";
  if (k.info.variants.varlen && rng() % 2) {
    const SeqLens lens = draw_lengths(rng, c.in.p.batch, c.in.p.n_q, c.in.p.n_k);
    plain = to_varlen(c.in, lens);
    how = describe(lens) + "; ";
  }
  Inputs strided = plain;
  for (auto [name, t] : {std::pair{"q", &strided.q}, std::pair{"k", &strided.k}, std::pair{"v", &strided.v},
                         std::pair{"d_o", &strided.d_o}}) {
    if (t->shape.empty()) continue;
    how += std::string(name) + ": ";
    *t = draw_strided(*t, rng, &how);
    how += "; ";
  }
  note_problem("compact problem", plain);
  note_problem("strided problem", strided);
  note_transform(how);
  const bool g = grads(k, c);  // one kernel on the same data: every output, bit for bit
  const Run a = execute(k, plain, c.cfg, g), b = execute(k, strided, c.cfg, g);
  if (std::string e = both_ran(a, b); !e.empty()) return e;
  const std::string m = same_outputs(plain.p, a.out, b.out, g);
  return m.empty() ? "" : fmt::format("{}compact against strided: {}", how, m);
}

std::string law_alibi_zero(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  Inputs zero = c.in;
  zero.p.alibi = true;
  zero.alibi_slopes = HostTensor(DType::F32, {zero.p.heads_q});  // +0 for every head
  note_problem("zero-slope ALiBi problem", zero);
  const bool g = grads(k, c);
  const Run a = execute(k, c.in, c.cfg, g), b = execute(k, zero, c.cfg, g);
  if (std::string e = both_ran(a, b); !e.empty()) return e;
  const std::string m = same_outputs(c.in.p, a.out, b.out, g);
  return m.empty() ? "" : "ALiBi with zero slopes against no ALiBi: " + m;
}

// Every head's sink at -inf (contract v3): weight exp(-inf) = 0 exactly, so the problem is the one
// without sinks. Bitwise for a kernel whose declared arithmetic has exp(0) == 1 exactly (a sink that
// does not move the max rescales by exactly 1); otherwise the run with sinks is held to the no-sink
// problem's certified reference and error bound.
std::string law_sink_neg_inf(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  Inputs none = c.in;
  none.p.sinks = true;
  none.sinks = HostTensor(DType::F32, {none.p.heads_q});
  for (int64_t h = 0; h < none.p.heads_q; ++h) none.sinks.set(h, -std::numeric_limits<double>::infinity());
  note_problem("problem with every sink at -inf", none);
  const bool g = grads(k, c);
  const bool bitwise = k.info.arithmetic && k.info.arithmetic(c.in.p, c.cfg).exp_exact_at_zero;
  if (!bitwise) {
    const Run b = execute(k, none, c.cfg, has_backward(k, c));
    if (!b.error.empty()) return "the kernel threw: " + b.error;
    const std::string m = check_outputs(k, c.in, b.out, oracle(k, c.in, c.cfg));
    return m.empty() ? "" : "sinks at -inf against the certified reference without sinks: " + m;
  }
  const Run a = execute(k, c.in, c.cfg, g), b = execute(k, none, c.cfg, g);
  if (std::string e = both_ran(a, b); !e.empty()) return e;
  const std::string m = same_outputs(c.in.p, a.out, b.out, g);
  return m.empty() ? "" : "sinks at -inf against no sinks: " + m;
}

// A boolean mask tensor with the bits of a built-in causal mask (either alignment) on a problem
// without one: the built-in mask's outputs. (Windows are window_mask's: window (n, 0) is the causal
// mask, so a window's faults stay that law's own.) Bitwise
// where the kernel declares mask_walk under the FA2 loop order (a hidden key adds nothing, a tile of
// hidden keys rescales by exp(0) = 1); otherwise the masked run is held to its certified reference and
// bound (the exact values are the built-in mask's).
std::string law_mask_tensor_builtin(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  if (!mask_size_ok(c.in.p)) throw NotApplicable("a mask tensor past 2^22 elements, or a varlen or paged problem");
  Rng rng(c.aux);
  Inputs builtin = c.in;
  Problem& bp = builtin.p;
  // Either alignment, the other where the kernel declines the one drawn (PyTorch SDPA takes top-left only).
  bp.mask = rng() % 2 ? Mask::CausalTopLeft : Mask::CausalBottomRight;
  if (!claims(k, builtin)) bp.mask = bp.mask == Mask::CausalTopLeft ? Mask::CausalBottomRight : Mask::CausalTopLeft;
  Inputs masked = builtin;
  masked.p.mask = Mask::None, masked.p.window_left = masked.p.window_right = -1;
  masked.p.mask_kind = MaskKind::Bool;
  const int64_t bm = rng() % 2 ? 1 : bp.batch, hm = rng() % 2 ? 1 : bp.heads_q;
  masked.mask = HostTensor(DType::BOOL, {bm, hm, bp.n_q, bp.n_k});
  masked.p.mask_b = int32_t(bm), masked.p.mask_h = int32_t(hm);
  for (int64_t x = 0; x < masked.mask.numel(); ++x) {
    const int64_t i = (x / bp.n_k) % bp.n_q, j = x % bp.n_k;
    masked.mask.set(x, visible(bp, i, j, bp.n_q, bp.n_k) ? 1.0 : 0.0);
  }
  const std::string what = mask_name(bp.mask);
  if (!claims(k, builtin) || !claims(k, masked))
    throw NotApplicable("the kernel declines the built-in mask " + what + " or its mask tensor");
  note_problem("problem with a boolean mask tensor equal to " + what, masked);
  const bool g = grads(k, c);
  const bool bitwise = k.info.exact.mask_walk && c.cfg.order != LoopOrder::FA1;
  if (!bitwise) {
    const Run b = execute(k, masked, c.cfg, has_backward(k, c));
    if (!b.error.empty()) return "the kernel threw: " + b.error;
    const std::string m = check_outputs(k, masked, b.out, oracle(k, masked, c.cfg));
    return m.empty() ? "" : "a mask tensor equal to " + what + " against its certified reference: " + m;
  }
  const Run a = execute(k, builtin, c.cfg, g), b = execute(k, masked, c.cfg, g);
  if (std::string e = both_ran(a, b); !e.empty()) return e;
  const std::string m = same_outputs(bp, a.out, b.out, g);
  return m.empty() ? "" : "a boolean mask tensor equal to " + what + " against the built-in mask: " + m;
}

// A block mask against the dense boolean mask tensor of the same blocks: the same bits where the
// kernel declares mask_walk; otherwise both runs are held to their certified reference and bound.
std::string law_block_mask_dense(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  if (!mask_size_ok(c.in.p)) throw NotApplicable("a block mask's dense twin past 2^22 elements, or a varlen or paged problem");
  Rng rng(c.aux);
  std::string how;
  const Inputs blocks = with_block_mask(c.in, rng, &how);
  Inputs dense = c.in;
  dense.p.mask_kind = MaskKind::Bool;
  dense.mask = dense_of_block_mask(blocks);
  dense.p.mask_b = blocks.p.block_b, dense.p.mask_h = blocks.p.block_h;
  if (!claims(k, blocks) || !claims(k, dense))
    throw NotApplicable("the kernel declines the block mask or its dense mask tensor");
  note_problem("problem with a block mask", blocks);
  note_transform(how);
  const bool g = grads(k, c);
  if (!k.info.exact.mask_walk) {
    const Inputs* both[] = {&blocks, &dense};
    for (const Inputs* in : both) {
      const Run r = execute(k, *in, c.cfg, has_backward(k, c));
      if (!r.error.empty()) return "the kernel threw: " + r.error;
      const std::string m = check_outputs(k, *in, r.out, oracle(k, *in, c.cfg));
      if (!m.empty())
        return fmt::format("{} ({}) against its certified reference: {}", in == &blocks ? "block mask" : "dense mask",
                           how, m);
    }
    return "";
  }
  const Run a = execute(k, blocks, c.cfg, g), b = execute(k, dense, c.cfg, g);
  if (std::string e = both_ran(a, b); !e.empty()) return e;
  const std::string m = same_outputs(c.in.p, a.out, b.out, g);
  return m.empty() ? "" : fmt::format("{} against the dense mask tensor of its blocks: {}", how, m);
}

// Sequences of no query (with or without keys) and of no key are inserted anywhere in a varlen batch
// (within its longest lengths): the other sequences keep their bits, the keys no query reads get zero
// gradients, and the rows with no key give o = 0, lse = -inf, d_q = 0.
std::string law_zero_length(const Kernel& k, const Case& c_in) {
  require_dense(c_in);
  const Case c = with_d_v_source(k, c_in);
  Rng rng(c.aux);
  const SeqLens lens = draw_lengths(rng, c.in.p.batch, c.in.p.n_q, c.in.p.n_k);
  const Inputs base = to_varlen(c.in, lens);
  const int32_t max_q = base.p.n_q, max_k = base.p.n_k;
  SeqLens more;
  std::vector<int64_t> at(lens.q.size());  // where sequence b of base sits in `more`
  std::vector<int> kind;                   // per sequence of `more`: -1 base's, 0 (0, 0), 1 (0, k), 2 (q, 0)
  for (size_t b = 0; b < lens.q.size(); ++b)
    more.q.push_back(lens.q[b]), more.k.push_back(lens.k[b]), more.src.push_back(lens.src[b]), kind.push_back(-1);
  for (int x = 0, count = 1 + int(rng() % 3); x < count; ++x) {
    const size_t pos = size_t(rng() % (more.q.size() + 1));
    const int what = max_q == 0 ? int(rng() % 2) : int(rng() % 3);
    const int32_t q = what == 2 ? 1 + int32_t(rng() % uint64_t(max_q)) : 0;
    const int32_t kk = what == 1 ? int32_t(rng() % uint64_t(max_k + 1)) : 0;
    more.q.insert(more.q.begin() + long(pos), q), more.k.insert(more.k.begin() + long(pos), kk);
    more.src.insert(more.src.begin() + long(pos), 0), kind.insert(kind.begin() + long(pos), what);
  }
  for (size_t y = 0, b = 0; y < kind.size(); ++y)
    if (kind[y] < 0) at[b++] = int64_t(y);
  const Inputs padded = to_varlen(c.in, more);
  note_problem("varlen batch", base);
  note_problem("batch with zero-length sequences", padded);
  note_transform(describe(lens) + " with sequences inserted: " + describe(more));
  const bool g = grads(k, c);
  const Run a = execute(k, base, c.cfg, g), z = execute(k, padded, c.cfg, g);
  if (std::string e = both_ran(a, z); !e.empty()) return e;
  const std::string how = describe(lens) + " with sequences inserted: " + describe(more);
  for (size_t b = 0; b < lens.q.size(); ++b) {
    const std::string m = same_sequence(base, a.out, int64_t(b), padded, z.out, at[b], g, true);
    if (!m.empty()) return fmt::format("{}; sequence {} (now {}) changed: {}", how, b, at[b], m);
  }
  const Problem& p = padded.p;
  const Seqs seqs = padded.seqs();
  for (int64_t y = 0; y < int64_t(kind.size()); ++y) {
    for (int64_t h = 0; kind[size_t(y)] == 2 && h < p.heads_q; ++h)
      for (int64_t i = 0; i < more.q[size_t(y)]; ++i) {
        const int64_t row = q_row(p, seqs, y, h, i);
        // A kernel that writes no lse leaves the suite's fill there: only o and d_q are its answer.
        bool ok = !k.info.writes_lse || z.out.lse.get(lse_index(p, seqs, y, h, i)) == -kInf;
        for (int64_t x = 0; x < head_dim_v(p); ++x) ok &= z.out.o.get(row * head_dim_v(p) + x) == 0;
        for (int64_t x = 0; g && x < p.d; ++x) ok &= z.out.d_q.get(row * p.d + x) == 0;
        if (!ok)
          return fmt::format(
              "{}; sequence {} has no key, yet row (h={}, i={}) has lse {:.9g}, o[0] {:.9g} (expected -inf, 0, d_q "
              "0)\n",
              how, y, h, i, z.out.lse.get(lse_index(p, seqs, y, h, i)), z.out.o.get(row * head_dim_v(p)));
      }
    for (int64_t h = 0; g && kind[size_t(y)] == 1 && h < p.heads_kv; ++h)
      for (int64_t j = 0; j < more.k[size_t(y)]; ++j) {
        const int64_t row = kv_row(p, seqs, y, h, j);
        bool ok = true;
        for (int64_t x = 0; x < p.d; ++x) ok &= z.out.d_k.get(row * p.d + x) == 0;
        for (int64_t x = 0; x < head_dim_v(p); ++x) ok &= z.out.d_v.get(row * head_dim_v(p) + x) == 0;
        if (!ok)
          return fmt::format("{}; sequence {} has no query, yet key {} (kv head {}) has a nonzero d_k or d_v\n", how, y,
                             j, h);
      }
  }
  return "";
}

}  // namespace

// laws_window.cpp
std::string law_window_mask(const Kernel& k, const Case& c);
std::string law_window_invisible(const Kernel& k, const Case& c);
std::string law_softcap(const Kernel& k, const Case& c);

void add_variant_laws(std::vector<Law>& out) {
  using R = Regime;
  const std::vector<Regime> plain = {R::Normal, R::Outliers, R::Grid};
  out.push_back({.id = "varlen_split",
                 .sentence = "a varlen batch equals its sequences run one by one (bitwise)",
                 .regimes = plain,
                 .backward = true,
                 .needs_variants = {.varlen = true},
                 .check = law_varlen_split});
  out.push_back({.id = "paged",
                 .sentence = "paged K/V equals the same keys contiguous, for every page size (bitwise)",
                 .regimes = plain,
                 .backward = true,
                 .needs_variants = {.varlen = true, .paged = true},
                 .check = law_paged});
  out.push_back({.id = "padded_varlen",
                 .sentence = "sequences at padded offsets (padding between them) give the compact varlen batch's bits",
                 .regimes = plain,
                 .backward = true,
                 .needs_variants = {.varlen = true, .padded = true},
                 .check = law_padded_varlen});
  out.push_back({.id = "strides",
                 .sentence = "the same data in any strides gives the same bits",
                 .regimes = plain,
                 .backward = true,
                 .needs_variants = {.strides = true},
                 .check = law_strides});
  out.push_back({.id = "window_mask",
                 .sentence = "window (n, 0) is the causal mask of its alignment and (n, n) no mask (bitwise)",
                 .regimes = plain,
                 .backward = true,
                 .needs_variants = {.window = true},
                 .check = law_window_mask});
  out.push_back({.id = "window_invisible",
                 .sentence = "a key outside a row's window never influences the row (bitwise)",
                 .regimes = {R::Normal, R::Outliers, R::Huge},
                 .backward = true,
                 .needs_variants = {.window = true},
                 .check = law_window_invisible});
  out.push_back({.id = "softcap",
                 .sentence = "with softcap c every score stays within (-c, c), and c -> infinity is no softcap",
                 .regimes = {R::Normal, R::Outliers, R::Huge},
                 .needs_variants = {.softcap = true},
                 .check = law_softcap,
                 .needs_lse = true});
  out.push_back({.id = "alibi_zero",
                 .sentence = "ALiBi with zero slopes equals no ALiBi (bitwise)",
                 .regimes = plain,
                 .backward = true,
                 .needs_variants = {.alibi = true},
                 .check = law_alibi_zero});
  out.push_back({.id = "sink_neg_inf",
                 .sentence = "a sink at -inf is no sink (bitwise where exp(0) == 1 is declared and within the bound elsewhere)",
                 .regimes = plain,
                 .backward = true,
                 .needs_variants = {.sinks = true},
                 .check = law_sink_neg_inf});
  out.push_back({.id = "mask_tensor_builtin",
                 .sentence = "a boolean mask tensor equal to a causal mask gives its bits (bitwise where "
                             "mask_walk is declared, within the bound elsewhere)",
                 .regimes = plain,
                 .backward = true,
                 .needs_variants = {.mask_bool = true},
                 .check = law_mask_tensor_builtin});
  out.push_back({.id = "block_mask_dense",
                 .sentence = "a block mask equals the dense boolean mask of its blocks (bitwise where mask_walk is "
                             "declared, within the bound elsewhere)",
                 .regimes = plain,
                 .backward = true,
                 .needs_variants = {.mask_bool = true, .block_mask = true},
                 .check = law_block_mask_dense});
  out.push_back({.id = "zero_length",
                 .sentence = "zero-length sequences produce nothing and disturb nothing",
                 .regimes = plain,
                 .backward = true,
                 .needs_variants = {.varlen = true},
                 .check = law_zero_length});
}

}  // namespace fc::props
