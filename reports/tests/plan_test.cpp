// The audit's variant cases (reports/variant_plan.cpp): every variant regime in every plan and dtype,
// inputs that are consistent and use exactly the case's variant, reproducible from (id, seed), and
// element labels in the variants' own coordinates.
#include <algorithm>
#include <cmath>
#include <set>

#include "reports/cell.hpp"
#include "reports/plan.hpp"
#include "reports/variant_plan.hpp"
#include "tests/catch.hpp"

using namespace fc;
using namespace fc::report;

namespace {

// The variant names a case of each regime uses (paged is always varlen too).
std::vector<std::string> expected_variants(const std::string& regime) {
  if (regime == "paged") return {"varlen", "paged"};
  return {regime};
}

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
        CHECK(cases >= 1);
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
