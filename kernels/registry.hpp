// The kernel registry: one table of every kernel flashcheck can run (CPU, CUDA, mutants, plugins).
// Host only. A kernel is a row: what it claims (capabilities) and two entry points on host tensors.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "arithmetic.h"
#include "exactness.hpp"
#include "tensor.hpp"

namespace fc {

enum class LoopOrder : int32_t { FA2 = 0, FA1 = 1 };  // FA2: Q tile outer; FA1: KV tile outer

// Run-time configuration of a kernel. Zero / default fields mean "the kernel's default".
struct Config {
  int32_t block_m = 0;  // kBlockM: query rows per tile
  int32_t block_n = 0;  // kBlockN: keys per tile
  LoopOrder order = LoopOrder::FA2;
  DType accum = DType::F32;    // accumulation type (F32, or F16 where a kernel offers it)
  bool deterministic = false;  // backward: bitwise-repeatable variant where offered
};

struct KernelInfo {
  std::string name;
  std::string device;         // "cpu" or "cuda"
  bool mutant = false;        // planted bug: the suite must catch it
  std::string description;    // one line
  std::vector<DType> dtypes;  // storage dtypes supported
  std::vector<Mask> masks;
  std::vector<int32_t> head_dims;  // empty: any d >= 1
  bool gqa = true;
  bool backward = false;
  bool any_tile = false;        // accepts any block_m x block_n >= 1
  std::vector<Config> configs;  // tile configs offered (block-size invariance ranges over these)
  bool writes_lse = true;
  bool stores_s_p = false;  // S and P rounded to storage before use (a 3-pass baseline); the
                            // error model charges those roundings (reference/bounds)
  // How the kernel computes a problem under a config: the rounding chain of every sum, for the error
  // model (kernels/arithmetic.h). Empty: charged as undeclared_arithmetic (any order, any rounding).
  std::function<Arithmetic(const Problem&, const Config&)> arithmetic;
  Exactness exact;             // what the metamorphic laws may ask for bit for bit
  bool large_offsets = false;  // indexes tensors of more than 2^31 elements (64-bit offsets): the
                               // large_offsets law holds it to one such case
};

using ForwardFn = std::function<void(const Problem&, const Config&, const HostTensor& q, const HostTensor& k,
                                     const HostTensor& v, HostTensor& o, HostTensor& lse)>;
// Backward: o and lse are the forward's outputs (the kernel's own, or the suite's when the kernel
// writes no lse); d_q, d_k, d_v come out shaped and typed like q, k, v.
using BackwardFn = std::function<void(const Problem&, const Config&, const HostTensor& q, const HostTensor& k,
                                      const HostTensor& v, const HostTensor& o, const HostTensor& lse,
                                      const HostTensor& d_o, HostTensor& d_q, HostTensor& d_k, HostTensor& d_v)>;

struct Kernel {
  KernelInfo info;
  std::function<bool(const Problem&)> supports;  // shape/dtype/mask check; never throws
  ForwardFn forward;
  BackwardFn backward;  // empty when info.backward is false
};

// Every registered kernel, in a stable order: CPU kernels, CUDA kernels (when built with CUDA),
// then mutants. Built on first use.
const std::vector<Kernel>& registry();
const Kernel* find_kernel(const std::string& name);  // nullptr when unknown

// Helpers for running a kernel: allocate outputs of the right shape/dtype and call it.
Outputs run_forward(const Kernel& k, const Inputs& in, const Config& cfg = {});
// Forward then backward (needs in.d_o); fills every field of Outputs.
Outputs run_forward_backward(const Kernel& k, const Inputs& in, const Config& cfg = {});

// Whether a kernel's device is present on this machine ("cpu" always; "cuda" when built with CUDA and
// a device answers). Callers skip, and report as skipped, the kernels whose device is absent.
bool device_present(const std::string& device);

// Whether k claims (and its supports() accepts) the problem.
bool claims(const Kernel& k, const Problem& p);

// Registration hooks, one per family; registry.cpp calls each (CUDA only when built with it).
void register_cpu_kernels(std::vector<Kernel>& out);
void register_cuda_kernels(std::vector<Kernel>& out);
void register_mutant_kernels(std::vector<Kernel>& out);

}  // namespace fc
