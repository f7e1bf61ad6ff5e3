// The variant laws bite, each with a criterion of its own: the variant mutants' kernel without its
// fault passes every variant law, and each variant law kills, within `flashcheck check`'s default
// budget, a mutant that no other variant law kills. (mutants_kill_test holds `reference` to missing
// them; laws_cpu_test holds cpu_tiled and cpu_naive to every law.)
#include "tests/catch.hpp"

#include <map>

#include "kernels/mutants/variant_faulty.hpp"
#include "properties/runner.hpp"
#include "verdict/verdict.hpp"

namespace {

using namespace fc::props;

std::vector<const Law*> variant_laws() {
  std::vector<const Law*> out;
  for (const Law& l : laws())
    if (!fc::covers(fc::Variants{}, l.needs_variants)) out.push_back(&l);
  return out;
}

}  // namespace

TEST_CASE("the variant mutants' kernel without its fault passes every variant law", "[cpu]") {
  using fc::mutants::VariantFault;
  const fc::Kernel clean =
      fc::mutants::make_variant_faulty_kernel(VariantFault::None, "variant_faulty_none", "no fault");
  REQUIRE(variant_laws().size() == 12);
  for (const Law* law : variant_laws()) {
    const LawResult r = run_law(*law, clean, {});
    INFO(law->id << ": " << r.message << r.counterexample);
    CHECK(r.applies);
    CHECK(r.ok);
  }
}

TEST_CASE("each variant law kills a mutant no other variant law kills", "[cpu][volume]") {
  const std::map<std::string, std::string> witness = {
      {"varlen_split", "mutant_varlen_max_alignment"},
      {"paged", "mutant_page_size_128"},
      {"strides", "mutant_strides_ignored"},
      {"window_mask", "mutant_window_right_exclusive"},
      {"window_invisible", "mutant_window_left_wide"},
      {"softcap", "mutant_softcap_dropped"},
      {"alibi_zero", "mutant_alibi_forces_causal"},
      {"zero_length", "mutant_zero_keys_nan"},
      {"sink_neg_inf", "mutant_sink_divides"},
      {"mask_tensor_builtin", "mutant_mask_divides"},
      {"block_mask_dense", "mutant_block_mask_divides"},
      {"padded_varlen", "mutant_padded_wide_exp"},
  };
  for (const Law* law : variant_laws()) {
    REQUIRE(witness.count(law->id) == 1);
    const fc::Kernel* mutant = fc::find_kernel(witness.at(law->id));
    REQUIRE(mutant != nullptr);
    for (const Law* other : variant_laws()) {
      const LawResult r = run_law(*other, *mutant, {});
      INFO(other->id << " on " << mutant->info.name << ": " << r.message);
      CHECK(r.applies);
      CHECK((!r.ok) == (other == law));
    }
  }
}

TEST_CASE("a failing element is named in its tensor's own layout", "[cpu]") {
  fc::Problem p;
  p.batch = 2, p.heads_q = 4, p.heads_kv = 2, p.n_q = 3, p.n_k = 5, p.d = 8, p.d_v = 6;
  // Dense o (2, 4, 3, d_v = 6): flat 1 * 72 + 2 * 18 + 1 * 6 + 5 = 119.
  CHECK(fc::verdict::element_name(p, "o", 119) == "o[b=1,h=2,i=1,c=5]");
  // Dense d_k (2, 2, 5, d = 8): flat 1 * 80 + 1 * 40 + 4 * 8 + 7 = 159; d_v's width is 6: 1 * 60 + 4 * 6 + 5.
  CHECK(fc::verdict::element_name(p, "d_k", 159) == "d_k[b=1,h=1,j=4,c=7]");
  CHECK(fc::verdict::element_name(p, "d_v", 89) == "d_v[b=1,h=0,j=4,c=5]");
  CHECK(fc::verdict::element_name(p, "lse", 1 * 12 + 3 * 3 + 2) == "lse[b=1,h=3,i=2]");
  // Varlen: o (total_q = 5, 4, 6), lse (4, 5).
  p.varlen = true, p.total_q = 5, p.total_k = 7;
  CHECK(fc::verdict::element_name(p, "o", 3 * 24 + 1 * 6 + 2) == "o[token=3,h=1,c=2]");
  CHECK(fc::verdict::element_name(p, "lse", 2 * 5 + 4) == "lse[h=2,token=4]");
  // Paged k (num_pages, page_size = 4, 2, 8): page 1, slot 3, head 1, column 0.
  p.page_size = 4, p.num_pages = 3;
  CHECK(fc::verdict::element_name(p, "k", (1 * 4 + 3) * 16 + 1 * 8) == "k[page=1,slot=3,h=1,c=0]");
}
