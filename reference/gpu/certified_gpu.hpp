// The certified oracle on the GPU (docs/error-model.md, "The certified oracle on the GPU"): the same
// certificate as fc::ref::certified (the value and a rigorous elementwise bound on its distance to the
// exact result, plus o_mag), computed in float64 on a CUDA device with every bound term computed there
// too. Built only with CUDA (target fc_reference_gpu); reference/gpu/oracle_select.hpp is the one
// entry point the rest of flashcheck calls.
#pragma once

#include <stdexcept>
#include <string>

#include "reference/certified.hpp"

namespace fc::ref::gpu {

// Thrown when the GPU oracle does not take a problem (not_covered's reasons, or scores past its range
// found while running).
struct NotCovered : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Why the GPU oracle does not cover problem p (grads: with the backward), in a few words ("head dims
// past 256"); empty when it does. Says nothing of the device or its memory. not_covered(in): the inputs ("a non-finite input ..."), empty when in range.
std::string not_covered(const Problem& p, bool grads);
std::string not_covered(const Tensors64& in);
// Whether a CUDA device is present and usable.
bool device_present();
// Device memory the oracle allocates for p (bytes), and the free memory of the device now.
double device_bytes(const Problem& p, bool grads);
double device_free_bytes();
// How the oracle and the error model run on the device.
struct Schedule {
  // The scores' and dP's dot products on the float64 tensor cores (reference/gpu/tensor_dots.cuh)
  // where the device has them, else on the CUDA cores. The oracle's results are the same bits either
  // way (gpu_oracle_test); the error model's sums change order, which its slack covers (gpu_bounds_test).
  bool tensor_cores = true;
};
// Whether the current device has the float64 tensor cores (compute capability 8.0 on).
bool tensor_cores_present();
// The certificate of (p, in). Throws NotCovered (not_covered's reasons, or rows whose scores leave the
// GPU's range: |s| past about 2^44, where the CPU oracle takes MPFR), std::runtime_error on a CUDA error.
Certified certified(const Problem& p, const Tensors64& in, const Schedule& schedule = {});

// The device's exp, log and tanh of each x (for the libm test: the bound charges exp and log 2 ulp,
// tanh 4).
void device_libm(const std::vector<double>& x, std::vector<double>& exp_x, std::vector<double>& log_x,
                 std::vector<double>& tanh_x);

}  // namespace fc::ref::gpu
