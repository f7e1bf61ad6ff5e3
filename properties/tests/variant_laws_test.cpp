// The variant laws bite, each with a criterion of its own: the variant mutants' kernel without its
// fault passes every variant law, and each variant law kills, within `flashcheck check`'s default
// budget, a mutant that no other variant law kills. (mutants_kill_test holds `reference` to missing
// them; laws_cpu_test holds cpu_tiled and cpu_naive to every law.)
#include "tests/catch.hpp"

#include <map>

#include "kernels/mutants/variant_faulty.hpp"
#include "properties/runner.hpp"

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
  REQUIRE(variant_laws().size() == 8);
  for (const Law* law : variant_laws()) {
    const LawResult r = run_law(*law, clean, {});
    INFO(law->id << ": " << r.message << r.counterexample);
    CHECK(r.applies);
    CHECK(r.ok);
  }
}

TEST_CASE("each variant law kills a mutant no other variant law kills", "[cpu]") {
  const std::map<std::string, std::string> witness = {
      {"varlen_split", "mutant_varlen_max_alignment"}, {"paged", "mutant_page_size_128"},
      {"strides", "mutant_strides_ignored"},           {"window_mask", "mutant_window_right_exclusive"},
      {"window_invisible", "mutant_window_left_wide"}, {"softcap", "mutant_softcap_dropped"},
      {"alibi_zero", "mutant_alibi_forces_causal"},    {"zero_length", "mutant_zero_keys_nan"},
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
