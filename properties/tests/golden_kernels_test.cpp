// The seeds' worked examples (docs/laws.md) on every registered correct kernel that claims them, in
// each storage type it offers where the inputs are exact. Expected values are the seeds' printed
// numbers; the tolerance is their printing (half a unit in the last printed digit) plus the
// kernel's error bound, nothing else.
#include "tests/catch.hpp"

#include <cmath>

#include "verdict/verdict.hpp"

namespace {

using namespace fc;

Inputs make(DType t, int32_t n_q, int32_t n_k, int32_t d, const std::vector<double>& q, const std::vector<double>& k,
            const std::vector<double>& v, const std::vector<double>& d_o = {}) {
  const Problem p{.n_q = n_q, .n_k = n_k, .d = d, .dtype = t, .scale = 1};
  Inputs in{p,
            HostTensor::from_f64(t, shape_q(p), q),
            HostTensor::from_f64(t, shape_kv(p), k),
            HostTensor::from_f64(t, shape_kv(p), v),
            {}};
  if (!d_o.empty()) in.d_o = HostTensor::from_f64(t, shape_q(p), d_o);
  return in;
}

// A softmax row x as attention: q = e_1, k_j = x_j e_1, V = I (d = n), so o = softmax(x).
Inputs softmax_row(DType t, const std::vector<double>& x, bool with_d_o) {
  const int32_t n = int32_t(x.size());
  std::vector<double> q(size_t(n), 0.0), k(size_t(n * n), 0.0), v(size_t(n * n), 0.0), d_o(size_t(n), 0.0);
  q[0] = 1, d_o[0] = 1;
  for (int32_t j = 0; j < n; ++j) k[size_t(j * n)] = x[size_t(j)], v[size_t(j * n + j)] = 1;
  return make(t, 1, n, n, q, k, v, with_d_o ? d_o : std::vector<double>{});
}

// Every correct kernel x storage type that claims `in` (re-typed to each dtype), on every device
// present here (CUDA kernels join on a GPU machine).
template <class F>
void each_kernel(const std::function<Inputs(DType)>& build, F&& check) {
  int runs = 0;
  for (const Kernel& k : registry()) {
    if (k.info.mutant || !device_present(k.info.device)) continue;
    for (DType t : k.info.dtypes) {
      const Inputs in = build(t);
      if (!claims(k, in.p)) continue;
      const verdict::Run r = verdict::execute(k, in, Config{}, in.has_d_o() && k.info.backward);
      INFO(k.info.name << " " << dtype_name(t) << " " << r.error);
      REQUIRE(r.error.empty());
      check(k, in, r.out, verdict::bounds_for(k, in, Config{}, verdict::certify(in)));
      ++runs;
    }
  }
  CHECK(runs > 0);
}

void near(double got, double printed, double half_unit, double bound) {
  CHECK(std::fabs(got - printed) <= half_unit + bound);
}

}  // namespace

TEST_CASE("every kernel reproduces the seeds' 3x2 example", "[cpu]") {
  const std::vector<double> expected{0.910, 0.755, 0.532, 0.532, 0.845, 0.578};
  each_kernel(
      [](DType t) {
        return make(t, 3, 3, 2, {1, 0, 0, 2, 1, 1}, {1, 1, 0, 1, 2, 0}, {1, 0, 0, 1, 1, 1});
      },
      [&](const Kernel&, const Inputs&, const Outputs& out, const ref::Bounds& B) {
        for (int64_t x = 0; x < 6; ++x) near(out.o.get(x), expected[size_t(x)], 5e-4, B.o[size_t(x)]);
      });
}

TEST_CASE("every kernel reproduces the seeds' softmax rows", "[cpu]") {
  each_kernel(
      [](DType t) {
        return softmax_row(t, {2, 1, 3, 0}, false);
      },
      [](const Kernel&, const Inputs&, const Outputs& out, const ref::Bounds& B) {
        const double p[] = {0.2369, 0.0871, 0.6439, 0.0321};
        for (int64_t j = 0; j < 4; ++j) near(out.o.get(j), p[j], 5e-5, B.o[size_t(j)]);
      });
  each_kernel(
      [](DType t) {
        return softmax_row(t, {101, 100, 102}, false);
      },
      [](const Kernel&, const Inputs&, const Outputs& out, const ref::Bounds& B) {
        const double p[] = {0.245, 0.090, 0.665};
        for (int64_t j = 0; j < 3; ++j) near(out.o.get(j), p[j], 5e-4, B.o[size_t(j)]);
      });
}

TEST_CASE("every kernel's backward resurrects the seeds' P_2 = 0.090", "[cpu]") {
  // Row [101, 100, 102]: d_o = e_1 makes d_v_j = P_j d_o, so d_v[j = 1, c = 0] is the resurrected
  // P_2 = e^(100 - 102) / 1.5032 (the seeds count keys from 1).
  each_kernel(
      [](DType t) {
        return softmax_row(t, {101, 100, 102}, true);
      },
      [](const Kernel& k, const Inputs& in, const Outputs& out, const ref::Bounds& B) {
        if (!out.has_grads()) return;
        near(out.d_v.get(1 * in.p.d + 0), 0.090, 5e-4, B.d_v[size_t(1 * in.p.d)]);
        near(std::exp(100.0 - 102.0) / 1.5032, 0.090, 5e-4, 0.0);  // the seeds' arithmetic
      });
}
