// certified_bench: certified forward+backward vs plain fp64 Eigen attention (naive_fp64), one head,
// same inputs, same run; then the certified oracle against exact (256 bits) on a small case.
// Usage: certified_bench [n=4096] [d=128] [dtype=f16|bf16|f32|f64] [reps=3] (best of reps)
#include <Eigen/Core>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <malloc.h>
#include <random>
#include <string>

#include "naive_fp64.hpp"
#include "reference/certified.hpp"
#include "reference/certified_internal.hpp"
#include "reference/exact.hpp"
#include "reference/tests/certified_cases.hpp"

namespace {

using fc::ref::Mat;

double round_to(const std::string& t, double x) {
  if (t == "f16") return double(float(Eigen::half(float(x))));       // x is first rounded to fp32:
  if (t == "bf16") return double(float(Eigen::bfloat16(float(x))));  // fine for random test data
  if (t == "f32") return double(float(x));
  return x;
}

Mat random_mat(std::mt19937_64& rng, Eigen::Index rows, Eigen::Index cols, const std::string& t) {
  std::normal_distribution<double> dist(0.0, 1.0);
  Mat m(rows, cols);  // (rows, cols)
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = round_to(t, dist(rng));
  return m;
}

// Process CPU time (single-threaded code): the machine is shared, so wall time is noisy.
double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double wall_now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

template <class F>
double seconds(F&& f) {
  const double t0 = cpu_now();
  f();
  return cpu_now() - t0;
}

void small_case_errors(const std::string& t) {
  fc::Problem p;
  p.n_q = 48;
  p.n_k = 64;
  p.d = 16;
  p.heads_q = 2;
  p.heads_kv = 1;
  p.mask = fc::Mask::CausalBottomRight;
  p.scale = 1.0 / std::sqrt(16.0);
  std::mt19937_64 rng(7);
  fc::ref::Tensors64 in;
  auto fill = [&](std::vector<double>& x, size_t n, double s) {
    std::normal_distribution<double> dist(0.0, s);
    x.resize(n);
    for (auto& e : x) e = round_to(t, dist(rng));
  };
  fill(in.q, size_t(fc::numel_q(p)), 3.0);
  fill(in.k, size_t(fc::numel_kv(p)), 3.0);
  fill(in.v, size_t(fc::numel_kv(p)), 1.0);
  fill(in.d_o, size_t(fc::numel_q(p)), 1.0);
  const fc::ref::Result64 ex = fc::ref::exact(p, in, 256);
  const fc::ref::Certified c = fc::ref::certified(p, in);
  double worst_ratio = 0, worst_rel = 0, worst_err_rel = 0;
  for (size_t i = 0; i < ex.o.size(); ++i) {
    const double diff = std::fabs(c.value.o[i] - ex.o[i]);
    worst_ratio = std::max(worst_ratio, diff / c.err.o[i]);
    worst_rel = std::max(worst_rel, diff / c.o_mag[i]);
    worst_err_rel = std::max(worst_err_rel, c.err.o[i] / c.o_mag[i]);
  }
  auto normwise = [](const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& e,
                     double& diff, double& err) {
    diff = err = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff += (a[i] - b[i]) * (a[i] - b[i]);
      err += e[i] * e[i];
    }
    diff = std::sqrt(diff);
    err = std::sqrt(err);
  };
  std::printf("small case (batch 1, heads 2/1 GQA, n_q 48, n_k 64, d 16, causal_bottom_right, %s, q,k ~ N(0,9)):\n",
              t.c_str());
  std::printf("  o:   max |cert-exact|/err = %.3g   max |cert-exact|/o_mag = %.3g   max err/o_mag = %.3g\n",
              worst_ratio, worst_rel, worst_err_rel);
  const fc::ref::testing::Scales sc = fc::ref::testing::natural_scales(p, in);  // one kv group
  for (auto [name, a, b, e, scale_f] : {std::tuple{"d_q", &c.value.d_q, &ex.d_q, &c.err.d_q, sc.dq[0]},
                                        std::tuple{"d_k", &c.value.d_k, &ex.d_k, &c.err.d_k, sc.dk[0]},
                                        std::tuple{"d_v", &c.value.d_v, &ex.d_v, &c.err.d_v, sc.dv[0]}}) {
    double diff, err;
    normwise(*a, *b, *e, diff, err);
    double within = 0;
    for (size_t i = 0; i < a->size(); ++i) within = std::max(within, std::fabs((*a)[i] - (*b)[i]) / (*e)[i]);
    std::printf(
        "  %s: |cert-exact|_F = %.3g   |err|_F = %.3g = %.3g of the natural scale   max elementwise "
        "|cert-exact|/err = %.3g\n",
        name, diff, err, err / scale_f, within);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Eigen::Index n = argc > 1 ? std::atol(argv[1]) : 4096, d = argc > 2 ? std::atol(argv[2]) : 128;
  const std::string t = argc > 3 ? argv[3] : "f16";
  const int reps = argc > 4 ? std::atoi(argv[4]) : 3;
  // Fresh pages cost this VM about as much as a GEMM pass over them: keep freed memory in the heap
  // (no mmap, no trim) so that, after the first rep, both sides are measured on warm memory.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  std::mt19937_64 rng(42);
  const Mat q = random_mat(rng, n, d, t), k = random_mat(rng, n, d, t), v = random_mat(rng, n, d, t),
            d_o = random_mat(rng, n, d, t);
  const double scale = 1.0 / std::sqrt(double(d));
  std::printf(
      "certified_bench: n_q = n_k = %ld, d = %ld, inputs %s-representable N(0,1), no mask, %d rep(s), "
      "Eigen %d.%d.%d, single thread, best CPU time of the reps\n",
      long(n), long(d), t.c_str(), reps, EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);

  double t_naive = 1e300, t_cert = 1e300, t_fwd = 1e300, t_bwd = 1e300, t_gemm = 1e300, t_s = 1e300, t_dp = 1e300,
         t_pv = 1e300, t_long = 1e300, w_naive = 1e300, w_cert = 1e300;
  for (int rep = 0; rep < reps; ++rep) {
    double w0 = wall_now();
    t_naive = std::min(t_naive, seconds([&] { fc::ref::bench::naive_fp64(q, k, v, d_o, scale); }));
    w_naive = std::min(w_naive, wall_now() - w0);
    fc::ref::Tensors64 in{std::vector<double>(q.data(), q.data() + q.size()),
                          std::vector<double>(k.data(), k.data() + k.size()),
                          std::vector<double>(v.data(), v.data() + v.size()),
                          std::vector<double>(d_o.data(), d_o.data() + d_o.size())};  // (1, 1, n, d) each
    fc::Problem p;
    p.n_q = p.n_k = int32_t(n);
    p.d = int32_t(d);
    p.scale = scale;
    w0 = wall_now();
    t_cert = std::min(t_cert, seconds([&] { fc::ref::certified(p, in); }));  // the public entry point
    w_cert = std::min(w_cert, wall_now() - w0);
    fc::ref::cert::GroupIn g;
    g.scale = scale;
    g.q = q, g.d_o = d_o, g.k = k, g.v = v;
    g.first.assign(size_t(n), 0);
    g.n_vis.assign(size_t(n), n);
    g.bad.assign(size_t(n), 0);
    fc::ref::cert::GroupFwd f;
    const double tf = seconds([&] { f = fc::ref::cert::forward(g); });
    const double tb = seconds([&] { fc::ref::cert::backward(g, f); });
    t_fwd = std::min(t_fwd, tf);
    t_bwd = std::min(t_bwd, tb);
    // Pieces, timed alone: one plain GEMM (the unit), the exact products, the chunked long products.
    t_gemm = std::min(t_gemm, seconds([&] { Mat s = q * k.transpose(); }));
    t_s = std::min(t_s, seconds([&] { fc::ref::cert::exact_abt(q, k, 0x1p-60 / scale); }));
    t_dp = std::min(t_dp, seconds([&] { fc::ref::cert::exact_abt(d_o, v, 0, /*allow_plain=*/true); }));
    Mat vv(n, 2 * d), c;  // (n, 2d)
    vv << v, v.cwiseAbs();
    t_pv = std::min(t_pv, seconds([&] { fc::ref::cert::chunked_product(f.p, vv, c); }));
    t_long = std::min(t_long, seconds([&] { fc::ref::cert::chunked_product(f.p.transpose(), d_o, c); }));
  }
  std::printf("plain fp64 Eigen attention (fwd+bwd): %.3f s\n", t_naive);
  std::printf(
      "certified (fwd+bwd, fc::ref::certified): %.3f s   (internals timed alone: forward %.3f s, backward "
      "%.3f s)\n",
      t_cert, t_fwd, t_bwd);
  std::printf("ratio certified / plain:              %.3f   (wall clock: %.3f s / %.3f s = %.3f)\n", t_cert / t_naive,
              w_cert, w_naive, w_cert / w_naive);
  std::printf(
      "pieces (timed alone): one plain GEMM Q·Kᵀ %.3f s | exact S = Q·Kᵀ (Ozaki) %.3f s | "
      "dP = dO·Vᵀ (exact, or plain + |dO||V|ᵀ bound) %.3f s | chunked P̂·[V |V|] %.3f s | one chunked long product "
      "(P̂ᵀ·dO) %.3f s\n",
      t_gemm, t_s, t_dp, t_pv, t_long);
  const double counted = t_s + t_pv + t_dp + 3 * t_long;
  std::printf(
      "  certified = exact S + P̂[V|V|] + dP + 3 long products (%.3f s) + O(N^2) scalar passes "
      "(exp, Sum2, dS with bounds: ~%.3f s)\n",
      counted, t_cert - counted);
  small_case_errors(t);
  return 0;
}
