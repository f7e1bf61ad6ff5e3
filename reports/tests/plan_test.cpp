// The audit's variant cases (reports/variant_plan.cpp): every variant regime in every plan and dtype,
// inputs that are consistent and use exactly the case's variant, reproducible from (id, seed), and
// element labels in the variants' own coordinates; and the largest score a case reports (score_max).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <set>

#include <map>

#include "reports/cell.hpp"
#include "reports/run.hpp"
#include "reports/subject.hpp"
#include "reports/plan.hpp"
#include "reports/variant_plan.hpp"
#include "tests/catch.hpp"

using namespace fc;
using namespace fc::report;

namespace {

// The variant names a case of each regime uses (paged and padded varlen are always varlen too).
std::vector<std::string> expected_variants(const std::string& regime) {
  if (regime == "paged") return {"varlen", "paged"};
  if (regime == "padded_varlen") return {"varlen", "padded_varlen"};
  return {regime};
}

// The variant of that name alone, as Variants.
Variants variant_named(const std::string& name) {
  Variants v;
  const std::pair<bool*, const char*> named[] = {{&v.varlen, "varlen"},
                                                 {&v.paged, "paged"},
                                                 {&v.window, "window"},
                                                 {&v.softcap, "softcap"},
                                                 {&v.alibi, "alibi"},
                                                 {&v.d_v, "d_v"},
                                                 {&v.strides, "strides"},
                                                 {&v.sinks, "sinks"},
                                                 {&v.padded, "padded_varlen"},
                                                 {&v.mask_bool, "mask_bool"},
                                                 {&v.mask_additive, "mask_additive"},
                                                 {&v.block_mask, "block_mask"}};
  for (auto [flag, n] : named)
    if (name == n) *flag = true;
  REQUIRE(variant_names(v) == std::vector<std::string>{name});
  return v;
}

// Contract v3's regimes, in the full plan only.
const std::vector<std::string> kV3 = {"sinks", "padded_varlen", "mask_bool", "mask_additive", "block_mask"};

CaseSpec case_of(const std::string& id) {
  CaseSpec c;
  REQUIRE(find_case(id, &c));
  return c;
}

}  // namespace

TEST_CASE("variant cases: consistent inputs using their variant alone, in every plan and dtype", "[cpu]") {
  for (bool quick : {true, false}) {
    PlanOptions o;
    o.quick = quick;
    const std::vector<CaseSpec> plan = audit_plan(o);
    for (DType t : o.dtypes)
      for (const std::string& regime : variant_regime_names()) {
        CAPTURE(quick, dtype_name(t), regime);
        int cases = 0;
        std::set<int32_t> page_sizes;
        std::set<Mask> window_masks;
        bool empty_q = false, empty_k = false;
        for (const CaseSpec& c : plan) {
          if (c.regime != regime || c.p.dtype != t) continue;
          CAPTURE(c.id);
          ++cases;
          CHECK(c.rows == 0);
          CHECK(variant_names(case_variants(c)) == expected_variants(regime));
          const Inputs in = make_inputs(c, 7);
          CHECK(validate(in) == "");
          CHECK(variant_names(variants_of(in)) == expected_variants(regime));
          CHECK(inputs_hash(in) == inputs_hash(make_inputs(c, 7)));
          CHECK(inputs_hash(in) != inputs_hash(make_inputs(c, 8)));
          CaseSpec found;
          REQUIRE(find_case(c.id, &found));
          CHECK(found.p.page_size == c.p.page_size);
          CHECK(found.len_q == c.len_q);
          page_sizes.insert(c.p.page_size);
          if (has_window(c.p)) window_masks.insert(c.p.mask);
          empty_q = empty_q || std::count(c.len_q.begin(), c.len_q.end(), 0) > 0;
          empty_k = empty_k || std::count(c.len_k.begin(), c.len_k.end(), 0) > 0;
        }
        // Contract v3's regimes are not in the quick plan (its committed baseline is contract v2's).
        CHECK(full_plan_only(regime) == (std::find(kV3.begin(), kV3.end(), regime) != kV3.end()));
        if (quick && full_plan_only(regime))
          CHECK(cases == 0);
        else
          CHECK(cases >= (quick ? 1 : 2));
        if (regime == "varlen" || regime == "paged") CHECK((empty_q && empty_k));
        if (regime == "paged" && !quick) CHECK(page_sizes.size() >= 3);
        if (regime == "window")
          CHECK(window_masks.count(Mask::CausalTopLeft) + window_masks.count(Mask::CausalBottomRight) == 2);
      }
  }
}

TEST_CASE("paged cases: every key on its own page slot, the slots no sequence reads far off", "[cpu]") {
  const CaseSpec c = case_of("F16/paged/n128_p7");
  const Inputs in = make_inputs(c, 1);
  const Problem& p = in.p;
  const Seqs s = in.seqs();
  std::vector<int> reads(size_t(p.num_pages) * p.page_size, 0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t j = 0; j < seq_n_k(p, s, b); ++j) ++reads[size_t(kv_row(p, s, b, 0, j) / p.heads_kv)];
  CHECK(*std::max_element(reads.begin(), reads.end()) == 1);
  int unread = 0;
  for (size_t slot = 0; slot < reads.size(); ++slot)
    if (reads[slot] == 0) {
      ++unread;
      CHECK(std::fabs(in.k.get(int64_t(slot) * p.heads_kv * p.d)) == 100.0);
    }
  CHECK(unread >= p.page_size);  // the spare page at least
}

TEST_CASE("element labels name the variants' coordinates", "[cpu]") {
  // varlen n32: lengths q {0, 32, 1, 21, 0, 29}, 2 heads, d = d_v = 64; packed token 33 is row 0 of
  // sequence 3.
  const CaseSpec v = case_of("F16/varlen/n32_br");
  CHECK(element_label(v, "o", (33 * 2 + 1) * 64 + 5) == "o[b=3,h=1,i=0,c=5]");
  CHECK(element_label(v, "lse", 83 + 82) == "lse[b=5,h=1,i=28]");                    // (heads_q, total_q = 83)
  CHECK(element_label(v, "d_k", (32 * 2 + 0) * 64 + 1) == "d_k[b=1,h=0,j=16,c=1]");  // len_k {16, 32, ...}
  // paged, page size 7: (num_pages, page_size, heads_kv, d)
  const CaseSpec pg = case_of("F16/paged/n32_p7");
  CHECK(element_label(pg, "d_k", ((3 * 7 + 4) * 2 + 1) * 64 + 2) == "d_k[page=3,slot=4,h=1,c=2]");
  // d = 128, d_v = 64: o and d_q rows of different widths
  const CaseSpec dv = case_of("F16/d_v/n32_d128_dv64");
  CHECK(element_label(dv, "o", ((0 * 2 + 1) * 32 + 3) * 64 + 7) == "o[b=0,h=1,i=3,c=7]");
  CHECK(element_label(dv, "d_q", ((0 * 2 + 1) * 32 + 3) * 64 + 7) == "d_q[b=0,h=0,i=17,c=71]");
  // dense: as before
  const CaseSpec n = case_of("F16/normal/n64");
  CHECK(element_label(n, "o", ((0 * 2 + 1) * 64 + 10) * 64 + 3) == "o[b=0,h=1,i=10,c=3]");
}

TEST_CASE("contract v3 cells: valid inputs of their variant, within the MPFR oracle's size, passing on cpu_tiled",
          "[cpu]") {
  PlanOptions o;
  o.regimes = kV3;
  const std::vector<CaseSpec> plan = audit_plan(o);
  REQUIRE(plan.size() == kV3.size() * 2 * o.dtypes.size());
  const Kernel* tiled = find_kernel("cpu_tiled");
  const Kernel* naive = find_kernel("cpu_naive");
  REQUIRE((tiled && naive));
  const Subject tiled_s = subject_of(*tiled, Config{}), naive_s = subject_of(*naive, Config{});
  std::set<std::string> patterns, empty_rows;
  for (const CaseSpec& c : plan) {
    CAPTURE(c.id);
    const Inputs in = make_inputs(c, 3);
    REQUIRE(validate(in) == "");
    const Problem& p = in.p;
    if (per_key_mask(p)) {  // at most 2^17 score terms
      CHECK(double(p.batch) * p.heads_q * p.n_q * double(p.n_k) * (p.d + head_dim_v(p)) <= double(1 << 17));
      patterns.insert(c.regime + "/" + c.mask_pattern);
    }
    if (has_mask_tensor(p)) {  // every mask has a hidden key and a visible one; random ones a row all hidden
      const std::vector<double> m = in.mask.to_f64();
      const double off = p.mask_kind == MaskKind::Bool ? 0.0 : -INFINITY;
      CHECK(std::count(m.begin(), m.end(), off) > 0);
      CHECK(std::count(m.begin(), m.end(), off) < int64_t(m.size()));
      if (c.mask_pattern == "random") {
        for (int64_t i = 0; i < p.n_q; ++i)
          if (std::all_of(m.begin() + i * p.n_k, m.begin() + (i + 1) * p.n_k, [&](double x) { return x == off; }))
            empty_rows.insert(c.id);
      }
      if (p.mask_kind == MaskKind::Additive)  // finite values other than 0 too
        CHECK(std::count_if(m.begin(), m.end(), [](double x) { return std::isfinite(x) && x != 0; }) > 0);
    }
    if (p.padded) {  // padding somewhere on each axis, read as far-off values by a kernel that reads it
      CHECK(p.total_q > int64_t(in.cu_seqlens_q.get(p.batch)));
      CHECK(p.total_k > int64_t(in.cu_seqlens_k.get(p.batch)));
      CHECK(std::fabs(in.q.get(0)) == 100.0);  // token 0 is padding in both cases
    }
    if (p.sinks) CHECK(in.sinks.numel() == p.heads_q);
    // Declared by cpu_tiled; cpu_naive declines sinks only; a kernel without the variant never gets it.
    CHECK(tiled_s.claims(c));
    CHECK(naive_s.claims(c) == !p.sinks);
    for (const std::string& v : expected_variants(c.regime)) {
      Kernel without = *tiled;
      const Variants drop = variant_named(v);
      Variants& have = without.info.variants;
      have.varlen = have.varlen && !drop.varlen, have.sinks = have.sinks && !drop.sinks;
      have.padded = have.padded && !drop.padded, have.mask_bool = have.mask_bool && !drop.mask_bool;
      have.mask_additive = have.mask_additive && !drop.mask_additive;
      have.block_mask = have.block_mask && !drop.block_mask;
      CHECK_FALSE(subject_of(without, Config{}).claims(c));
    }
  }
  CHECK(patterns.size() == 5);  // mask_bool and mask_additive both patterns, block_mask random
  CHECK(empty_rows.size() == 2 * o.dtypes.size());
  // Every cell passes on cpu_tiled (and cpu_naive where it claims the case), with a baseline.
  SweepOptions ro;
  ro.seed = 1;
  ro.jobs = 2;
  const Subject baseline = baseline_subject();
  const SweepResult r = run_sweep(plan, {tiled_s, naive_s}, &baseline, ro);
  CHECK(r.errors.empty());
  REQUIRE(r.cases.size() == plan.size());
  std::map<std::string, int> cells;
  for (const auto& cell : r.cells) {
    CAPTURE(cell.dump());
    CHECK(cell["status"] == "pass");
    ++cells[cell["kernel"].get<std::string>()];
  }
  CHECK(cells["cpu_tiled"] == int(plan.size()));
  CHECK(cells["cpu_naive"] == int(plan.size() - 2 * o.dtypes.size()));  // no sinks cell
  // Each case's JSON names its variant.
  for (const auto& cj : r.cases) {
    CAPTURE(cj.dump());
    const std::string rg = cj["regime"];
    const char* key = rg == "sinks"                                ? "sinks"
                      : rg == "padded_varlen"                      ? "padded"
                      : rg == "mask_bool" || rg == "mask_additive" ? "mask_tensor"
                                                                   : "block_mask";
    CHECK(cj.contains(key));
    if (rg == "mask_bool") CHECK(cj["mask_tensor"]["kind"] == "boolean");
    if (rg == "mask_additive") CHECK(cj["mask_tensor"]["kind"] == "additive");
  }
}

TEST_CASE("padded varlen labels name the sequence, or the padding", "[cpu]") {
  // n64: lengths q {0, 64, 1, 37, 0, 61}, padding before each {2, 0, 1, 3, 0, 7} and 16 after: sequence
  // 1 starts at token 2, sequence 2 at 67; token 66 is padding.
  const CaseSpec c = case_of("F32/padded_varlen/n64");
  CHECK(padded_starts(c, false) == std::vector<int32_t>{2, 2, 67, 71, 108, 115, 192});
  CHECK(element_label(c, "o", (3 * 2 + 1) * 64 + 5) == "o[b=1,h=1,i=1,c=5]");
  CHECK(element_label(c, "o", (67 * 2 + 0) * 64) == "o[b=2,h=0,i=0,c=0]");
  CHECK(element_label(c, "o", (66 * 2 + 0) * 64) == "o[b=pad,h=0,i=66,c=0]");
}

TEST_CASE("score_max: the largest scaled score of a sequence's last 64 rows, the same with any thread count", "[cpu]") {
  // A dense problem (batch, heads, n, d) with GQA; every q and k zero but three planted elements.
  CaseSpec c = case_of("F16/normal/n64");
  c.p.batch = 2, c.p.heads_q = 4, c.p.heads_kv = 2, c.p.n_q = c.p.n_k = 96;
  Inputs in = make_inputs(c, 3);
  const Problem& p = in.p;
  for (int64_t i = 0; i < in.q.numel(); ++i) in.q.set(i, 0.0);
  for (int64_t i = 0; i < in.k.numel(); ++i) in.k.set(i, 0.0);
  const auto at = [&](int64_t b, int64_t h, int64_t heads, int64_t i, int64_t col) {
    return ((b * heads + h) * p.n_q + i) * p.d + col;
  };
  // Batch 1, head 3 (kv head 1): row 95 against key 7 scores 4 * -3 = -12 before the scale.
  in.q.set(at(1, 3, p.heads_q, 95, 5), 4.0);
  in.k.set(at(1, 1, p.heads_kv, 7, 5), -3.0);
  // Row 31 is not among the last 64 rows (32 ... 95): its larger score (8 * -3) does not count.
  in.q.set(at(1, 3, p.heads_q, 31, 5), 8.0);
  CHECK(score_max(in) == std::fabs(p.scale * 12.0));
  // Random inputs: the per-head maxima side by side give what one thread gives.
  const Inputs r = make_inputs(c, 4);
  setenv("FC_THREADS", "1", 1);
  const double one = score_max(r);
  setenv("FC_THREADS", "3", 1);
  const double three = score_max(r);
  unsetenv("FC_THREADS");
  CHECK(one > 0);
  CHECK(std::bit_cast<uint64_t>(one) == std::bit_cast<uint64_t>(three));
}
