// The CUDA mutants (mutant_traits.hpp) are caught on the GPU: `flashcheck check`'s default budget
// (100 cases per law, seed 1) kills each one, one TEST_CASE (so one process under ctest) per mutant,
// since a fault may leave the CUDA context unusable; the large_offsets law kills the 32-bit-offset
// mutant that reference does not, padded_scratch the 32-bit padded-accumulator mutant that neither
// reference nor large_offsets does; the output guards name the element the past-the-end mutant
// writes; and the mutants' base kernels, narrowed to each mutant's dtype, head dim and tile, pass
// every law there (the kills are the faults', not the shapes').
#include "tests/catch.hpp"

#include <iostream>
#include <set>
#include <string>

#include "kernels/cuda/launchers.hpp"
#include "kernels/cuda/mutant_traits.hpp"
#include "kernels/cuda/tests/gpu_case.hpp"
#include "properties/runner.hpp"

namespace {

// The first law that fails on k under opt ("law: message"), or "" when every law holds.
std::string first_failing_law(const fc::Kernel& k, const fc::props::RunOptions& opt) {
  for (const fc::props::Law& law : fc::props::laws()) {
    const fc::props::LawResult r = fc::props::run_law(law, k, opt);
    if (r.applies && !r.ok) return law.id + ": " + r.message + r.counterexample + "replay: " + r.replay;
  }
  return "";
}

const fc::cuda::CudaMutant& mutant_row(const std::string& name) {
  for (const fc::cuda::CudaMutant& m : fc::cuda::kCudaMutants)
    if (name == m.name) return m;
  FAIL("no CUDA mutant named " << name);
  return fc::cuda::kCudaMutants[0];
}

bool wgmma(const fc::cuda::CudaMutant& m) {
  return m.site == fc::cuda::FaultSite::WgmmaForward || m.site == fc::cuda::FaultSite::WgmmaBackward;
}

// A Hopper-only kernel on another device: reported skipped (WARN), never silently passed.
bool unavailable(const fc::cuda::CudaMutant& m) {
  if (!wgmma(m) || fc::cuda::device_is_sm90()) return false;
  WARN(m.name << ": this device is not sm_90; skipped");
  return true;
}

void check_killed(const char* name) {
  const fc::cuda::CudaMutant& m = mutant_row(name);
  const fc::Kernel* k = fc::find_kernel(name);
  REQUIRE(k != nullptr);
  REQUIRE(k->info.mutant);
  if (unavailable(m)) return;
  const std::string killed = first_failing_law(*k, fc::props::RunOptions{});
  INFO(name << " (" << m.description << ")");
  CHECK_FALSE(killed.empty());
  if (!killed.empty()) std::cout << name << " killed by " << killed.substr(0, killed.find('\n')) << "\n";
}

// The mutant's base kernel (cuda_tiled or cuda_wgmma) without the fault, declaring only what the
// mutant's row declares: its one dtype, head dim and tile.
fc::Kernel narrowed_base(const fc::cuda::CudaMutant& m) {
  const fc::Kernel* mutant = fc::find_kernel(m.name);
  const fc::Kernel* base = fc::find_kernel(wgmma(m) ? "cuda_wgmma" : "cuda_tiled");
  REQUIRE(mutant != nullptr);
  REQUIRE(base != nullptr);
  fc::Kernel k = *base;
  k.info.dtypes = mutant->info.dtypes;
  k.info.head_dims = mutant->info.head_dims;
  k.info.configs = mutant->info.configs;
  return k;
}

}  // namespace

#define FC_MUTANT_KILLED(NAME) \
  TEST_CASE("check kills " NAME, "[gpu]") { check_killed(NAME); }

FC_MUTANT_KILLED("cuda_mutant_tiled_no_sync")
FC_MUTANT_KILLED("cuda_mutant_tiled_tail")
FC_MUTANT_KILLED("cuda_mutant_tiled_causal_skip")
FC_MUTANT_KILLED("cuda_mutant_tiled_offset32")
FC_MUTANT_KILLED("cuda_mutant_tiled_dq_plain_add")
FC_MUTANT_KILLED("cuda_mutant_tiled_store_past_end")
FC_MUTANT_KILLED("cuda_mutant_tiled_dq_acc_pad32")
FC_MUTANT_KILLED("cuda_mutant_wgmma_skip_k_full")
FC_MUTANT_KILLED("cuda_mutant_wgmma_ring_wrap")
FC_MUTANT_KILLED("cuda_mutant_wgmma_no_rescale")
FC_MUTANT_KILLED("cuda_mutant_wgmma_ds_no_swizzle")
FC_MUTANT_KILLED("cuda_mutant_wgmma_ds_sync_scope")

TEST_CASE("every CUDA mutant is registered, marked a mutant and has a kill test", "[gpu]") {
  const std::set<std::string> tested = {
      "cuda_mutant_tiled_no_sync",      "cuda_mutant_tiled_tail",          "cuda_mutant_tiled_causal_skip",
      "cuda_mutant_tiled_offset32",     "cuda_mutant_tiled_dq_plain_add",  "cuda_mutant_tiled_store_past_end",
      "cuda_mutant_tiled_dq_acc_pad32", "cuda_mutant_wgmma_skip_k_full",   "cuda_mutant_wgmma_ring_wrap",
      "cuda_mutant_wgmma_no_rescale",   "cuda_mutant_wgmma_ds_no_swizzle", "cuda_mutant_wgmma_ds_sync_scope"};
  std::set<std::string> table, registered;
  for (const fc::cuda::CudaMutant& m : fc::cuda::kCudaMutants) table.insert(m.name);
  for (const fc::Kernel& k : fc::registry())
    if (k.info.device == "cuda" && k.info.mutant) registered.insert(k.info.name);
  CHECK(table == tested);
  CHECK(registered == tested);
}

TEST_CASE("large_offsets kills cuda_mutant_tiled_offset32, which reference does not", "[gpu]") {
  const fc::Kernel* k = fc::find_kernel("cuda_mutant_tiled_offset32");
  REQUIRE(k != nullptr);
  const fc::props::LawResult ref = fc::props::run_law(*fc::props::find_law("reference"), *k, {});
  INFO("reference: " << ref.message);
  CHECK((ref.applies && ref.ok));
  // Last: a wrapped offset may fault and leave the context unusable.
  const fc::props::LawResult large = fc::props::run_law(*fc::props::find_law("large_offsets"), *k, {});
  CHECK(large.applies);
  CHECK_FALSE(large.ok);
}

TEST_CASE("the correct CUDA kernels hold large_offsets", "[gpu]") {
  for (const char* name : {"cuda_tiled", "cuda_wgmma"}) {
    const fc::Kernel* k = fc::find_kernel(name);
    REQUIRE(k != nullptr);
    const fc::props::LawResult r = fc::props::run_law(*fc::props::find_law("large_offsets"), *k, {});
    INFO(name << ": " << r.not_applicable << r.message);
    if (!r.applies && std::string(name) == "cuda_wgmma" && !fc::cuda::device_is_sm90()) continue;
    CHECK(r.applies);
    CHECK(r.ok);
  }
}

TEST_CASE("padded_scratch kills cuda_mutant_tiled_dq_acc_pad32 and neither reference nor large_offsets does", "[gpu]") {
  const fc::Kernel* k = fc::find_kernel("cuda_mutant_tiled_dq_acc_pad32");
  REQUIRE(k != nullptr);
  const fc::props::LawResult ref = fc::props::run_law(*fc::props::find_law("reference"), *k, {});
  INFO("reference: " << ref.message);
  CHECK((ref.applies && ref.ok));
  // No tensor of its cases passes 2^31, so it declares no 64-bit offsets: large_offsets is n/a.
  CHECK_FALSE(fc::props::run_law(*fc::props::find_law("large_offsets"), *k, {}).applies);
  // Last: a wrapped offset may fault and leave the context unusable.
  const fc::props::LawResult padded = fc::props::run_law(*fc::props::find_law("padded_scratch"), *k, {});
  INFO("padded_scratch: " << padded.not_applicable << padded.message.substr(0, 2000));
  CHECK(padded.applies);
  CHECK_FALSE(padded.ok);
}

TEST_CASE("the correct CUDA kernels hold padded_scratch", "[gpu]") {
  for (const char* name : {"cuda_tiled", "cuda_wgmma"}) {
    const fc::Kernel* k = fc::find_kernel(name);
    REQUIRE(k != nullptr);
    for (uint64_t seed : {1, 2}) {
      fc::props::RunOptions opt;
      opt.seed = seed;
      const fc::props::LawResult r = fc::props::run_law(*fc::props::find_law("padded_scratch"), *k, opt);
      INFO(name << " seed " << seed << ": " << r.not_applicable << r.message.substr(0, 2000));
      if (!r.applies && std::string(name) == "cuda_wgmma" && !fc::cuda::device_is_sm90()) continue;
      CHECK(r.applies);
      CHECK(r.ok);
    }
  }
}

// One head of n_q = 65 rows, so that the mutant's 128-row tile holds row n_q: the write past the end of
// o is in its guard, which names the element; the correct kernel on the same inputs leaves it alone.
TEST_CASE("the output guards name the element cuda_mutant_tiled_store_past_end writes past o", "[gpu]") {
  const fc::Problem p = fc::gpu_test::problem(fc::DType::F16, 64, fc::Mask::None, 1, 1, 1, 65, 64);
  const fc::Inputs in = fc::gpu_test::random_inputs(p, 7);
  const fc::Kernel* bad = fc::find_kernel("cuda_mutant_tiled_store_past_end");
  const fc::Kernel* good = fc::find_kernel("cuda_tiled");
  REQUIRE(bad != nullptr);
  REQUIRE(good != nullptr);
  fc::Config cfg;
  cfg.block_m = 128, cfg.block_n = 64;
  CHECK_NOTHROW(fc::gpu_test::run_fwd(*good, in, cfg));
  try {
    fc::gpu_test::run_fwd(*bad, in, cfg);
    FAIL("the write past the end of o went unnoticed");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("cuda_mutant_tiled_store_past_end forward: the kernel wrote") != std::string::npos);
    CHECK(what.find("past the end of o: its element 4160 (1 past its last, whose index is 4159)") != std::string::npos);
  }
}

TEST_CASE("the mutants' base kernels pass every law at the mutants' builds", "[gpu]") {
  for (const fc::cuda::CudaMutant& m : fc::cuda::kCudaMutants) {
    if (m.fault == fc::cuda::Fault::TiledOffset32 || (wgmma(m) && !fc::cuda::device_is_sm90())) continue;
    const std::string failed = first_failing_law(narrowed_base(m), fc::props::RunOptions{});
    INFO(m.name << "'s base kernel: " << failed);
    CHECK(failed.empty());
  }
}
