// cuda_naive (S and P materialised in storage) against the certified reference, and cuda_tiled
// against it under FlashAttention's own gate: fused-kernel error <= 2 x same-precision baseline.
#include "tests/catch.hpp"

#include "kernels/cuda/tests/gpu_case.hpp"

using namespace fc;
using namespace fc::gpu_test;

TEST_CASE("cuda_naive forward stays within the error bound of the certified reference", "[gpu]") {
  const Kernel& kern = cuda_kernel("cuda_naive");
  uint64_t seed = 40;
  for (DType t : {DType::F16, DType::BF16})
    for (int32_t d : {32, 64, 128})
      for (Mask mask : {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight}) {
        const Problem p = problem(t, d, mask, 2, 4, 2, 150, 97);
        INFO(dtype_name(t) << " d=" << d << " " << mask_name(mask));
        const Inputs in = random_inputs(p, seed++);
        const ref::Tensors64 in64 = tensors64(in, false);
        const ref::Certified c = ref::certified(p, in64);
        const ref::Bounds bd = ref::error_bounds(p, in64, c, declared_precision(kern, p));
        const Outputs out = run_fwd(kern, in);
        require_within("o", out.o, c.value.o, bd.o, t);
        require_within("lse", out.lse, c.value.lse, bd.lse, DType::F32);
      }
}

TEST_CASE("cuda_tiled error is at most twice cuda_naive's plus output rounding (FlashAttention rule)", "[gpu]") {
  const Kernel& tiled = cuda_kernel("cuda_tiled");
  const Kernel& naive = cuda_kernel("cuda_naive");
  uint64_t seed = 80;
  for (DType t : {DType::F16, DType::BF16})
    for (int32_t d : {64, 128})
      for (Mask mask : {Mask::None, Mask::CausalTopLeft}) {
        const Problem p = problem(t, d, mask, 1, 2, 2, 512, 512);
        INFO(dtype_name(t) << " d=" << d << " " << mask_name(mask));
        const Inputs in = random_inputs(p, seed++);
        const ref::Certified c = ref::certified(p, tensors64(in, false));
        const Outputs k = run_fwd(tiled, in), b = run_fwd(naive, in);
        const ref::FaRule r = ref::fa_rule(k.o.to_f64(), b.o.to_f64(), c.value.o, c.err.o, t);
        INFO("kernel err " << r.kernel_err << " baseline err " << r.baseline_err << " noise " << r.noise);
        REQUIRE(r.holds);
      }
}
