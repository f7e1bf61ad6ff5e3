// The CUDA kernel table without a GPU: every kernel and every CUDA mutant declares its arithmetic to
// the error model (an undeclared one would be charged the looser undeclared bound), and the
// declaration follows the tiles a config runs: the mutants' their own build's, through their base's.
#include <string>
#include <vector>

#include "tests/catch.hpp"

#include "contract/arithmetic.h"
#include "kernels/cuda/launchers.hpp"
#include "kernels/cuda/mutant_traits.hpp"
#include "kernels/registry.hpp"

using namespace fc;

namespace {

// The CUDA registry rows, kernels then mutants, as the registry makes them.
const std::vector<Kernel>& cuda_rows() {
  static const std::vector<Kernel> rows = [] {
    std::vector<Kernel> out;
    register_cuda_kernels(out);
    return out;
  }();
  return rows;
}

Problem problem(DType t, int32_t d) {
  Problem p;
  p.batch = 1, p.heads_q = p.heads_kv = 2, p.n_q = p.n_k = 256, p.d = d, p.dtype = t;
  return p;
}

}  // namespace

TEST_CASE("every row of the CUDA kernel table declares its arithmetic", "[cuda_table]") {
  REQUIRE(!cuda::cuda_kernel_table().empty());
  for (const cuda::CudaKernel& k : cuda::cuda_kernel_table()) {
    INFO(k.name);
    CHECK(k.arithmetic != nullptr);
  }
}

TEST_CASE("every CUDA registry row, mutants included, declares an arithmetic other than the undeclared one",
          "[cuda_table]") {
  REQUIRE(cuda_rows().size() == cuda::cuda_kernel_table().size() + std::size(cuda::kCudaMutants));
  for (const Kernel& k : cuda_rows()) {
    INFO(k.info.name);
    REQUIRE(k.info.arithmetic);
    const std::vector<int32_t> dims = k.info.head_dims.empty() ? std::vector<int32_t>{64} : k.info.head_dims;
    const std::vector<Config> configs = k.info.configs.empty() ? std::vector<Config>{Config{}} : k.info.configs;
    for (DType t : k.info.dtypes)
      for (int32_t d : dims)
        for (const Config& cfg : configs) {
          const Arithmetic a = k.info.arithmetic(problem(t, d), cfg);
          // undeclared_arithmetic: every chain in any order, the normaliser either the max or the lse.
          CHECK(a.s.adder != Adder::AnyOrder);
          CHECK(a.pv.adder != Adder::AnyOrder);
          CHECK(a.p_from == PFrom::Max);
          CHECK(a.operand == t);
          if (cfg.block_m > 0 && a.s.adder == Adder::TensorCore) {  // a tiled kernel: its config's tile
            CHECK(a.block_m == cfg.block_m);
            CHECK(a.pv.block == cfg.block_n);
          }
        }
  }
}

TEST_CASE("a CUDA mutant's arithmetic is its base kernel's on the tiles it is built for", "[cuda_table]") {
  for (const cuda::CudaMutant& m : cuda::kCudaMutants) {
    INFO(m.name);
    const Kernel* row = nullptr;
    for (const Kernel& k : cuda_rows())
      if (k.info.name == m.name) row = &k;
    REQUIRE(row != nullptr);
    for (bool deterministic : {false, true}) {
      Config cfg;  // the registry's default: the one tile the mutant is built with
      cfg.deterministic = deterministic;
      const Arithmetic a = row->info.arithmetic(problem(m.dtype, m.d), cfg);
      CHECK(a.s.adder == Adder::TensorCore);
      CHECK(a.block_m == m.forward.block_m);
      CHECK(a.pv.block == m.forward.block_n);
      CHECK(a.dq.block == (deterministic ? 0 : m.backward.block_n));
    }
  }
}
