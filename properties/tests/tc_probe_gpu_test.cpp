// What the error model assumes about the GPU, measured on it (label gpu; docs/error-model.md
// sections 2 and 7): ex2.approx.ftz.f32 within the declared 2 ulp over every float exponent argument
// the kernels use (x - m in [-127, 0]; below 2^-126 the result may flush), log2f within 1 ulp over
// every row sum l in [1, 2^20], and single mma.sync m16n8k16 instructions within the tensor-core
// step model that bounds_chain charges, on random and adversarial operands. Also printed: whether
// ex2.approx(0) is exactly 1 and whether a k16 instruction truncates once or twice (the model
// assumes neither).
#include "tests/catch.hpp"

#include <cmath>
#include <random>
#include <vector>

#include "contract/arithmetic.h"
#include "contract/tensor.hpp"
#include "properties/tests/tc_probe.hpp"
#include "reference/bounds.hpp"
#include "reference/bounds_chain.hpp"
#include "tests/exact_sum.hpp"

namespace {

using namespace fc;

using fc::testing::exact_sum;

struct Batch {
  std::vector<float> a, b, c;
  int count = 0;
  void add(DType t, const std::vector<double>& A, const std::vector<double>& B, const std::vector<double>& C) {
    for (double x : A) a.push_back(float(round_to(t, x)));
    for (double x : B) b.push_back(float(round_to(t, x)));
    for (double x : C) c.push_back(float(x));
    ++count;
  }
};

}  // namespace

TEST_CASE("ex2.approx.ftz and log2f stay within the declared ulps over the arguments the kernels use", "[gpu]") {
  const probe::Ulps e = probe::ex2_ulps(-0.0f, -127.0f);
  const probe::Ulps l = probe::log2_ulps(1.0f, 0x1p20f);
  WARN("ex2.approx.ftz.f32: largest error "
       << e.worst << " (units of 2^-23 of the result) at x = " << e.at << "; log2f: " << l.worst << " at " << l.at
       << "; ex2.approx(0) = " << probe::ex2_at(0.0f) << (probe::ex2_at(0.0f) == 1.0f ? " (exactly 1)" : " (not 1)"));
  CHECK(e.worst <= 2.0);  // kernels/cuda/arithmetic.cpp: exp_ulps = 2
  CHECK(l.worst <= 1.0);  // log_ulps = 1
}

TEST_CASE("mma.sync m16n8k16 stays within the tensor-core step model the error model charges", "[gpu]") {
  const Chain tc = tensor_core_chain();
  const ref::ChainWeights w = ref::chain_weights(tc, 16, true);  // the instruction's 16 products: 2 steps
  const double k_c = ref::plain_kappa(tc, 0, 17, 0, 3) - ref::plain_kappa(tc, 0, 17, 0, 1);  // C: 2 later steps
  std::mt19937_64 rng(3);
  std::normal_distribution<double> n01;
  for (DType t : {DType::F16, DType::BF16}) {
    Batch batch;
    // Row r of A against column c of B: mostly random; row 0 / column 0 of the adversarial instances
    // carry C = 1 against products just under the 2^-25 grid, just over it, alternating, or larger.
    for (int inst = 0; inst < 4096; ++inst) {
      std::vector<double> A(256), B(128), C(128);
      const int kind = inst % 8;
      for (double& x : A) x = n01(rng) * (kind == 7 ? 64 : 1);
      for (double& x : B) x = n01(rng);
      for (double& x : C) x = kind == 6 ? 0.0 : n01(rng) * (kind == 5 ? 1e-3 : 1);
      if (kind < 5) {
        C[0] = 1.0;
        for (int k = 0; k < 16; ++k) {
          const double p = kind == 0 ? 0.99 * 0x1p-25 : kind == 1 ? 1.01 * 0x1p-25 : kind == 2 ? 0x1p-24 : 0x1p-20;
          A[k] = (kind == 3 && k % 2) ? -0x1p-12 : 0x1p-12;  // a_k b_k = +-p
          B[k * 8] = p / 0x1p-12;
        }
      }
      batch.add(t, A, B, C);
    }
    std::vector<float> D;
    probe::mma_batch(t == DType::BF16, batch.a, batch.b, batch.c, D, batch.count);
    int bad = 0;
    double worst = 0;
    for (int inst = 0; inst < batch.count; ++inst)
      for (int r = 0; r < 16; ++r)
        for (int col = 0; col < 8; ++col) {
          const double Cv = batch.c[size_t(inst * 128 + r * 8 + col)];
          std::vector<double> terms{Cv};
          double bound = k_c * std::fabs(Cv);
          for (int k = 0; k < 16; ++k) {
            const double p =
                double(batch.a[size_t(inst * 256 + r * 16 + k)]) * batch.b[size_t(inst * 128 + k * 8 + col)];
            terms.push_back(p);
            bound += w.kappa[size_t(k)] * std::fabs(p);
          }
          bound = bound * w.scale() + (w.events + 2) * w.floor;
          const double err = std::fabs(double(D[size_t(inst * 128 + r * 8 + col)]) - exact_sum(terms));
          worst = std::max(worst, bound > 0 ? err / bound : 0.0);
          bad += err > bound;
        }
    INFO(dtype_name(t) << ": largest error / model bound " << worst);
    CHECK(bad == 0);
    WARN(dtype_name(t) << " mma.sync m16n8k16: largest error / model bound " << worst);
  }
  // One fused step of 16 or two of 8? C = 1 and six products of 2^-25 (1.5 ulp of 1), three in each
  // half of k: a single step keeps 1 + 1 ulp, two steps truncate 0.75 ulp away twice.
  Batch probe16;
  std::vector<double> A(256, 0.0), B(128, 0.0), C(128, 0.0);
  C[0] = 1.0;
  for (int k : {0, 1, 2, 8, 9, 10}) A[k] = 0x1p-12, B[k * 8] = 0x1p-13;
  probe16.add(DType::F16, A, B, C);
  std::vector<float> D;
  probe::mma_batch(false, probe16.a, probe16.b, probe16.c, D, 1);
  WARN("k16 with C = 1 and 6 x 2^-25: D = 1 + " << (double(D[0]) - 1) / 0x1p-23 << " ulp ("
                                                << (D[0] > 1.0f ? "one fused step of 16" : "two steps of 8") << ")");
}
