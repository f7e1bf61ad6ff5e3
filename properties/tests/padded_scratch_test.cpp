// The padded_scratch law's case (properties/laws_large.cpp): at every seed, for the head dims, dtypes,
// masks and GQA a device kernel may declare, a scratch padded to 128 rows per head passes 2^31
// elements while every tensor stays below it, inside a launch grid; the crossing test itself fails
// where a tensor crosses too or the scratch does not; the law is n/a on host kernels.
#include "tests/catch.hpp"

#include <string>

#include "properties/laws.hpp"
#include "properties/runner.hpp"

namespace {

constexpr int64_t k2to31 = int64_t(1) << 31;

// cpu_tiled's row declared as a device kernel with the given head dims and GQA.
fc::Kernel device_kernel(std::vector<int32_t> dims, bool gqa) {
  const fc::Kernel* base = fc::find_kernel("cpu_tiled");
  REQUIRE(base != nullptr);
  fc::Kernel k = *base;
  k.info.device = "cuda";
  k.info.head_dims = std::move(dims);
  k.info.gqa = gqa;
  k.info.dtypes = {fc::DType::F16, fc::DType::BF16};
  return k;
}

}  // namespace

TEST_CASE("padded_scratch's case crosses 2^31 in padded scratch alone, at every seed", "[cpu]") {
  for (const fc::Kernel& k : {device_kernel({64, 128}, true), device_kernel({}, false), device_kernel({32, 256}, true),
                              device_kernel({16}, true)}) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      const fc::Problem p = fc::props::padded_scratch_problem(k, seed);
      INFO("seed " << seed << ": " << p.batch << " x " << p.heads_q << " (" << p.heads_kv << "), n_q " << p.n_q
                   << ", n_k " << p.n_k << ", d " << p.d);
      CHECK(fc::props::padded_scratch_crosses(p));
      CHECK(fc::props::padded_scratch_elements(p) > k2to31);
      CHECK(fc::numel_q(p) < k2to31 / 8);
      CHECK(int64_t(p.batch) * p.heads_kv * p.n_k * p.d < k2to31 / 4);
      CHECK((p.n_q >= 1 && p.n_q <= 8));
      CHECK((p.batch >= 1 && p.batch <= 65535 && p.heads_q <= 65535));
      CHECK(p.heads_q % p.heads_kv == 0);
      CHECK((k.info.gqa || p.heads_kv == p.heads_q));
      CHECK((k.info.head_dims.empty() || std::count(k.info.head_dims.begin(), k.info.head_dims.end(), p.d) == 1));
      CHECK(fc::well_formed(p));
    }
  }
}

TEST_CASE("padded_scratch_crosses fails where a tensor crosses too or the scratch does not", "[cpu]") {
  fc::Problem p = fc::props::padded_scratch_problem(device_kernel({64}, false), 1);
  REQUIRE(fc::props::padded_scratch_crosses(p));
  fc::Problem whole = p;
  whole.n_q = 128 * 9;  // no padding: q crosses with the scratch
  CHECK_FALSE(fc::props::padded_scratch_crosses(whole));
  fc::Problem small = p;
  small.batch = 1;  // the scratch stays below 2^31
  CHECK_FALSE(fc::props::padded_scratch_crosses(small));
  fc::Problem long_keys = p;
  long_keys.n_k = 4096;  // k and v cross
  CHECK_FALSE(fc::props::padded_scratch_crosses(long_keys));
  // max(d, 32): a head dim of 8 pads to 32.
  fc::Problem narrow = p;
  narrow.d = 8;
  CHECK(fc::props::padded_scratch_elements(narrow) == fc::props::padded_scratch_elements(p) / 2);
}

TEST_CASE("padded_scratch is n/a on host kernels and applies to device kernels", "[cpu]") {
  const fc::props::Law* law = fc::props::find_law("padded_scratch");
  REQUIRE(law != nullptr);
  REQUIRE(law->device_only);
  const fc::Kernel* cpu = fc::find_kernel("cpu_tiled");
  REQUIRE(cpu != nullptr);
  CHECK_FALSE(fc::props::law_applies(*law, *cpu));
  const fc::props::LawResult r = fc::props::run_law(*law, *cpu, {});
  CHECK_FALSE(r.applies);
  CHECK(r.not_applicable.find("device") != std::string::npos);
  fc::Kernel dev = device_kernel({64}, true);
  dev.info.large_offsets = false;  // not gated on 64-bit tensor offsets: no tensor is large
  CHECK(fc::props::law_applies(*law, dev));
}
