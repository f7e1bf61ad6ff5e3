// compare_bench: `flashcheck compare`'s oracle path against a plain float64 attention of the same
// shape, measured in the same run, printed as a ratio (a program, not a test: reference/bench/README.md).
// The inputs (q k v d_o, N(0, 1) rounded to the dtype) and the outputs (the certified reference
// rounded to the dtype: a correct kernel's answer) are written to a scratch folder as safetensors;
// the oracle path is everything `compare` does with them: read both files, certify, bound every
// candidate key tile, run the same-precision baseline, measure every tensor (report::compare_report).
// The plain side is reference/bench/naive_fp64.cpp per (batch, head), heads side by side on the
// same threads (reference/parallel.hpp): each side gets every core.
// Usage: compare_bench [batch=1] [heads=2] [n=2048] [d=128] [dtype=F16|BF16] [reps=2] (best of reps)
#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "io/attention_io.hpp"
#include "io/safetensors.hpp"
#include "naive_fp64.hpp"
#include "reference/certified.hpp"
#include "reference/inputs64.hpp"
#include "reference/parallel.hpp"
#include "reports/compare.hpp"

namespace {

using fc::ref::Mat;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// One (batch, head) slice (n, d) of a dense (batch, heads, n, d) tensor.
Mat head_of(const std::vector<double>& x, int64_t bh, int64_t n, int64_t d) {
  return Eigen::Map<const Mat>(x.data() + bh * n * d, n, d);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fc;
  ref::restart_with_huge_pages(argv);  // as flashcheck does
  const int32_t batch = argc > 1 ? std::atoi(argv[1]) : 1, heads = argc > 2 ? std::atoi(argv[2]) : 2;
  const int32_t n = argc > 3 ? std::atoi(argv[3]) : 2048, d = argc > 4 ? std::atoi(argv[4]) : 128;
  const std::string dt = argc > 5 ? argv[5] : "F16";
  const int reps = argc > 6 ? std::atoi(argv[6]) : 2;
  DType t;
  if (!parse_dtype(dt.c_str(), &t) || (t != DType::F16 && t != DType::BF16) || batch < 1 || heads < 1 || n < 1 ||
      d < 1 || reps < 1) {
    std::fprintf(stderr, "usage: compare_bench [batch] [heads] [n] [d] [F16|BF16] [reps]\n");
    return 2;
  }
  Inputs in;
  in.p = Problem{batch, heads, heads, n, n, d, t, Mask::None, 1.0 / std::sqrt(double(d))};
  in.q = HostTensor(t, shape_q(in.p)), in.k = HostTensor(t, shape_kv(in.p));
  in.v = HostTensor(t, shape_kv(in.p)), in.d_o = HostTensor(t, shape_q(in.p));
  std::mt19937_64 rng(42);
  std::normal_distribution<double> dist(0.0, 1.0);
  for (HostTensor* x : {&in.q, &in.k, &in.v, &in.d_o})
    for (int64_t i = 0; i < x->numel(); ++i) x->set(i, dist(rng));  // rounded to the dtype
  const ref::Tensors64 t64 = ref::tensors64(in);
  // A correct kernel's outputs: the certified reference rounded once to the dtype (lse to F32).
  const ref::Certified c = ref::certified(in.p, t64);
  Outputs out;
  out.o = HostTensor::from_f64(t, shape_o(in.p), c.value.o);
  out.lse = HostTensor::from_f64(DType::F32, shape_lse(in.p), c.value.lse);
  out.d_q = HostTensor::from_f64(t, shape_q(in.p), c.value.d_q);
  out.d_k = HostTensor::from_f64(t, shape_kv(in.p), c.value.d_k);
  out.d_v = HostTensor::from_f64(t, shape_v(in.p), c.value.d_v);
  const std::string dir = (std::filesystem::temp_directory_path() / ("compare_bench." + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  report::CompareOptions o;
  o.inputs = dir + "/in.safetensors", o.outputs = dir + "/out.safetensors";
  io::write_safetensors(o.inputs, io::inputs_file(in));
  io::write_safetensors(o.outputs, io::outputs_file(out, io::problem_metadata(in.p)));
  // The report's numbers do not depend on the machine's caches (reports/run.cpp does the same).
  Eigen::setCpuCacheSizes(32 * 1024, 1024 * 1024, 8 * 1024 * 1024);

  std::printf("compare_bench: batch %d, heads %d, n_q = n_k = %d, d = %d, %s, forward + backward, %d thread(s), "
              "best wall time of %d rep(s)\n",
              batch, heads, n, d, dt.c_str(), ref::worker_threads(), reps);
  double t_plain = 1e300, t_compare = 1e300;
  std::string status;
  std::vector<std::pair<std::string, double>> stages;  // the best rep's
  for (int rep = 0; rep < reps; ++rep) {
    double t0 = now();
    ref::parallel_for(int64_t(batch) * heads, [&](int64_t bh) {
      (void)ref::bench::naive_fp64(head_of(t64.q, bh, n, d), head_of(t64.k, bh, n, d), head_of(t64.v, bh, n, d),
                                   head_of(t64.d_o, bh, n, d), in.p.scale);
    });
    t_plain = std::min(t_plain, now() - t0);
    t0 = now();
    const Inputs read = io::read_inputs(o.inputs);
    std::vector<std::pair<std::string, double>> st;
    const nlohmann::json r = report::compare_report(o, read, &st);
    if (now() - t0 < t_compare) stages = st;
    t_compare = std::min(t_compare, now() - t0);
    status = r["verdict"]["status"].get<std::string>();
  }
  std::filesystem::remove_all(dir);
  std::printf("plain fp64 attention (fwd+bwd):              %.3f s\n", t_plain);
  std::printf("compare's oracle path (files to verdict, %s): %.3f s\n", status.c_str(), t_compare);
  std::printf("ratio compare / plain:                        %.2f\n", t_compare / t_plain);
  for (const auto& [name, sec] : stages) std::printf("  compare stage %-10s %8.3f s\n", name.c_str(), sec);
  return status == "pass" ? 0 : 1;
}
