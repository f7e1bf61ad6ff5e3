// metrics_bench: the time of `compare`'s metrics stage alone (report::measure_outputs: verdict::hold,
// then measure and its quantiles for each tensor) on synthetic BF16 tensors of a training shape's
// size, printed per repetition with the numbers it measured (a program, not a test:
// reference/bench/README.md). The four tensors o, d_q, d_k, d_v are (1, n, heads, 128): a reference
// drawn from N(0, 0.05²), an output within a few bf16 ulps of it, a bound of |ref|/64. The printed
// quantiles and worst ratios show two builds measured the same numbers.
// Usage: metrics_bench [heads=32] [n=4096] [reps=3]. Threads: FC_THREADS (default: every hardware thread).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "contract/tensor.hpp"
#include "reference/bounds.hpp"
#include "reference/certified.hpp"
#include "reference/parallel.hpp"
#include "reports/cell.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  using namespace fc;
  ref::restart_with_huge_pages(argv);  // as flashcheck does
  const int32_t heads = argc > 1 ? std::atoi(argv[1]) : 32, n = argc > 2 ? std::atoi(argv[2]) : 4096;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  if (heads < 1 || n < 1 || reps < 1) {
    std::fprintf(stderr, "usage: metrics_bench [heads] [n] [reps]\n");
    return 2;
  }
  constexpr int32_t kD = 128;
  Inputs in;
  in.p = Problem{1, heads, heads, n, n, kD, DType::BF16, Mask::None, 1.0 / std::sqrt(double(kD))};
  const size_t size = size_t(heads) * size_t(n) * kD;
  std::mt19937_64 rng(42);
  std::normal_distribution<double> normal;
  ref::Certified want;
  ref::Bounds bounds;
  Outputs got;
  const auto draw = [&](std::vector<double>& ref, std::vector<double>& bound, HostTensor& out) {
    ref.resize(size), bound.resize(size);
    std::vector<double> y(size);
    for (size_t x = 0; x < size; ++x) {
      ref[x] = 0.05 * normal(rng);
      y[x] = round_to(DType::BF16, ref[x] * (1 + 0x1p-9 * normal(rng)));
      bound[x] = std::fabs(ref[x]) * 0x1p-6 + 1e-9;
    }
    out = HostTensor::from_f64(DType::BF16, shape_q(in.p), y);
  };
  draw(want.value.o, bounds.o, got.o);
  draw(want.value.d_q, bounds.d_q, got.d_q);
  draw(want.value.d_k, bounds.d_k, got.d_k);
  draw(want.value.d_v, bounds.d_v, got.d_v);
  want.o_mag.resize(size);
  for (size_t x = 0; x < size; ++x) want.o_mag[x] = std::fabs(want.value.o[x]) + 1e-3;
  std::printf("metrics_bench: 4 BF16 tensors of %zu elements (heads %d, n %d, d %d), %d thread(s)\n", size, heads, n,
              kD, ref::worker_threads());
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
    const std::map<std::string, report::TensorMetrics> m = report::measure_outputs(in, want, bounds, got, false);
    const double t = now() - t0;
    std::printf("rep %d: %.3f s (%.1f ns an element)\n", r, t, t * 1e9 / double(4 * size));
    for (const auto& [name, tm] : m)
      std::printf("  %-3s  err/bound p99 %.17g p50 %.17g max %.17g, ulp p99 %.17g\n", name.c_str(), tm.ratio_p99,
                  tm.ratio_p50, tm.ratio_max, tm.ulp_p99);
  }
  return 0;
}
