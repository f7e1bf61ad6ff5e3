// libFuzzer: cpu_tiled and cpu_naive, forward and backward, on cases from the structured decoder
// (fuzz/decode.hpp: shape, mask, GQA, tiles, scale, value regimes down to raw bit patterns), judged
// by fuzz/judge.hpp: empty rows exact, the blast radius of non-finite inputs bitwise, and within the
// error model's domain the certified reference within its bound plus one law (docs/laws.md). A failed
// judgement prints the case and aborts, so libFuzzer saves the input as a crash to minimise.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "fuzz/decode.hpp"
#include "fuzz/judge.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fc::fuzz::ByteSource src(std::string_view(reinterpret_cast<const char*>(data), size));
  static const char* const kKernels[] = {"cpu_tiled", "cpu_naive"};
  const fc::Kernel* k = fc::find_kernel(src.pick(kKernels, 2));
  const uint64_t law_pick = src.bits(1);
  fc::fuzz::ShapeLimits limits;
  limits.max_n = 16;
  limits.max_d = 8;
  const fc::props::Case c = fc::fuzz::decode_case(src, *k, limits);
  if (!fc::claims(*k, c.in.p)) return 0;
  const fc::fuzz::Judgement j = fc::fuzz::judge(*k, c, law_pick);
  if (j.ok()) return 0;
  std::fprintf(stderr, "flashcheck fuzz_kernels: %s failed %s:\n%s%s", k->info.name.c_str(), j.check.c_str(),
               j.failure.c_str(), fc::props::describe(c).c_str());
  std::abort();
}
