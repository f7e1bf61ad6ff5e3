// The kernel registry: one table of every kernel flashcheck can run (CPU, CUDA, mutants, plugins).
// Host only. A kernel is a row: what it claims (capabilities) and two entry points on host tensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "contract/arithmetic.h"
#include "contract/exactness.hpp"
#include "contract/merge.hpp"
#include "contract/tensor.hpp"

namespace fc {

enum class LoopOrder : int32_t { FA2 = 0, FA1 = 1 };  // FA2: Q tile outer; FA1: KV tile outer

// Run-time configuration of a kernel. Zero / default fields mean "the kernel's default".
struct Config {
  int32_t block_m = 0;  // kBlockM: query rows per tile
  int32_t block_n = 0;  // kBlockN: keys per tile
  LoopOrder order = LoopOrder::FA2;
  DType accum = DType::F32;    // accumulation type (F32, or F16 where a kernel offers it)
  bool deterministic = false;  // backward: bitwise-repeatable variant where offered
  int32_t splits = 0;          // split-KV count (0: the kernel's default, no split)
};

// The sequence lengths a kernel takes on one axis (a plugin's declarations): n % multiple == residue
// and min <= n <= max (max 0: no bound); with pow2 (the shape-bucket mode) also a power of two. The
// generators draw inside it (properties/generators.cpp).
struct Lengths {
  int32_t multiple = 1, residue = 0, min = 0, max = 0;  // min 0: zero-length sequences too (the contract has them)
  bool pow2 = false;
  bool admits(int64_t n) const {
    return n >= min && (max <= 0 || n <= max) && (multiple <= 1 || n % multiple == residue) &&
           (!pow2 || (n > 0 && (n & (n - 1)) == 0));
  }
  bool any() const { return multiple <= 1 && min <= 1 && max <= 0 && !pow2; }
  // The largest admitted length <= cap, or 0 when none is.
  int32_t below(int64_t cap) const {
    if (max > 0) cap = std::min<int64_t>(cap, max);
    if (pow2) {
      for (int64_t x = int64_t(1) << 30; x >= 1; x /= 2)
        if (x <= cap && admits(x)) return int32_t(x);
      return 0;
    }
    const int64_t m = multiple > 1 ? multiple : 1;
    const int64_t x = cap - ((cap - residue) % m + m) % m;
    return x >= std::max(min, 1) ? int32_t(x) : 0;
  }
  // The admitted length nearest to n from above, or the largest admitted one below it when none is
  // above (every set read from a declaration admits at least one length; 0 when this one admits none).
  int32_t snap(int64_t n) const {
    int64_t x = std::max<int64_t>(n, std::max(min, 1));
    if (pow2) {
      int64_t p = 1;
      while (p < x || !admits(p)) {
        if (max > 0 && p > max) return below(max);
        if (p > (int64_t(1) << 30)) return 0;
        p *= 2;
      }
      return int32_t(p);
    }
    const int64_t m = multiple > 1 ? multiple : 1;
    x += ((residue - x) % m + m) % m;
    if (max > 0 && x > max) return below(max);
    return int32_t(x);
  }
};

// The variants of contract v2 a kernel implements (docs/SEMANTICS.md). Inputs that use a variant
// the kernel does not declare are never sent to it (claims, run_forward).
struct Variants {
  bool varlen = false;         // sequences packed by cu_seqlens_q/k, zero-length ones included
  bool paged = false;          // paged K/V through a page table (always with varlen)
  bool window = false;         // sliding window (window_left, window_right)
  bool softcap = false;        // s <- c tanh(s / c)
  bool alibi = false;          // s -= slope_h |i' - j|
  bool d_v = false;            // d_v != d
  bool strides = false;        // strided q, k, v, d_o (and strided outputs when the caller allocates them so)
  bool sinks = false;          // contract v3: one sink logit per query head in the softmax denominator
  bool padded = false;         // contract v3: varlen tokens at cu_seqlens_*_padded offsets, padding between
  bool mask_bool = false;      // contract v3: a boolean mask tensor (dense problems)
  bool mask_additive = false;  // contract v3: an additive mask tensor, in one of KernelInfo::mask_dtypes
  bool block_mask = false;     // contract v3: a block-sparse mask of block_q x block_k blocks
};
// Every variant, and the names `flashcheck kernels` prints.
Variants all_variants();
std::vector<std::string> variant_names(const Variants& v);
// The variants a problem (and its inputs' strides) use.
Variants variants_of(const Problem& p);
Variants variants_of(const Inputs& in);
// Whether `have` covers every variant `need` uses.
bool covers(const Variants& have, const Variants& need);

// What a kernel computes: attention (forward, backward) or merge states (docs/SEMANTICS.md, "Merge
// states"). A law is of one kind (Law::merge) and judges only kernels of that kind.
enum class KernelKind : int32_t { Attention = 0, Merge = 1 };

struct KernelInfo {
  std::string name;
  KernelKind kind = KernelKind::Attention;  // Merge: no attention problem is ever claimed (no masks, no dtypes)
  std::string device;                       // "cpu" or "cuda"
  bool mutant = false;                      // planted bug: the suite must catch it
  std::string description;                  // one line
  std::vector<DType> dtypes;                // storage dtypes supported, one for every tensor
  std::vector<DtypeSet> mixed_dtypes;       // per-tensor dtypes supported ({q, kv, o} not all one; a plugin's
                                            // declared combinations): drawn beside `dtypes`
  std::vector<Mask> masks;
  std::vector<int32_t> head_dims;  // empty: any d >= 1
  bool gqa = true;
  bool backward = false;
  bool any_tile = false;              // accepts any block_m x block_n >= 1
  std::vector<Config> configs;        // tile configs offered (block-size invariance ranges over these)
  std::vector<Config> split_configs;  // split-KV configs (splits >= 2) judged by split_invariance alone, each
                                      // against its twin with splits = 0 (configs' entries with splits >= 2
                                      // are judged by it too)
  std::vector<DType> merge_dtypes;    // a merge kernel: the o dtypes it merges (lse is F32)
  bool writes_lse = true;
  bool stores_s_p = false;  // S and P rounded to storage before use (a 3-pass baseline); the
                            // error model charges those roundings (reference/bounds)
  Variants variants;        // contract v2 variants implemented (none: dense attention only)
  std::vector<DType> mask_dtypes = kernel_floats();  // additive masks taken (every kernel float)
  // How the kernel computes a problem under a config: the rounding chain of every sum, for the error
  // model (contract/arithmetic.h). Empty: charged as undeclared_arithmetic (any order, any rounding).
  std::function<Arithmetic(const Problem&, const Config&)> arithmetic;
  Exactness exact;             // what the metamorphic laws may ask for bit for bit
  bool large_offsets = false;  // indexes tensors of more than 2^31 elements (64-bit offsets): the
                               // large_offsets law holds it to one such case
  // Shapes a plugin declares it takes (fc_declarations); the defaults take every shape.
  Lengths n_q, n_k;
  int32_t max_batch = 0, max_heads = 0;  // 0: no bound
  double fixed_scale = 0;                // nonzero: the one softmax scale the kernel takes
  bool external = false;                 // a plugin or Python kernel: cases also reach its other paths
  bool atomic_backward = false;          // d_q (d_k, d_v) reduced in an unfixed order: the determinism law
                                         // holds the runs to the reordering tolerance, not to bits
};
// Whether p's shape lies inside what the kernel declares it takes (lengths, batch, heads, scale).
bool declared_shape(const KernelInfo& i, const Problem& p);

// Thrown by a kernel's forward or backward that declines to run a problem under a config it lists
// (a tile this shape does not admit): a declared refusal, not a wrong answer. verdict::execute carries
// it as Run::refused, and the audit reports such a cell as "refused" (any other exception: "error").
struct Refusal : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Forward: reads in (q, k, v and the variants' data), writes out.o and out.lse, which the caller
// allocates (compact, shaped by shape_o / shape_lse, unless it offers strided outputs to a kernel
// declaring strides).
using ForwardFn = std::function<void(const Inputs& in, const Config&, Outputs& out)>;
// Backward: reads in (with d_o) and out.o, out.lse as the forward wrote them (the kernel's own, or
// the suite's when the kernel writes no lse); writes out.d_q, out.d_k, out.d_v, allocated by the
// caller shaped and typed like q, k, v.
using BackwardFn = std::function<void(const Inputs& in, const Config&, Outputs& out)>;

// Merge: reads in (o_p, lse_p of every partial), writes out.o and out.lse (allocated by the caller,
// compact, shaped by shape_merge_o / shape_merge_lse).
using MergeFn = std::function<void(const MergeInputs& in, MergeOutputs& out)>;

struct Kernel {
  KernelInfo info;
  std::function<bool(const Problem&)> supports;  // shape/dtype/mask check; never throws
  ForwardFn forward;
  BackwardFn backward;  // empty when info.backward is false
  // A merge kernel (info.kind == KernelKind::Merge): the merge and the shapes it takes (empty: any).
  MergeFn merge;
  std::function<bool(const MergeProblem&)> merge_supports;
};

// Every registered kernel, in a stable order: CPU kernels, CUDA kernels (when built with CUDA),
// then mutants. Built on first use.
const std::vector<Kernel>& registry();
const Kernel* find_kernel(const std::string& name);  // nullptr when unknown

// Compact outputs of the contract's shapes for in: o and lse; with grads also d_q, d_k, d_v.
Outputs alloc_outputs(const Inputs& in, bool grads);

// Helpers for running a kernel: allocate outputs of the right shape/dtype and call it. Inputs that
// are inconsistent (validate) or use a variant the kernel does not declare: std::invalid_argument.
Outputs run_forward(const Kernel& k, const Inputs& in, const Config& cfg = {});
// The same into outputs the caller allocated (alloc_outputs' shapes and dtypes, in any strides that
// keep every element inside the storage: guarded outputs, kernels/hostile.hpp).
void run_forward_into(const Kernel& k, const Inputs& in, const Config& cfg, Outputs& out);
// Forward then backward (needs in.d_o); fills every field of Outputs.
Outputs run_forward_backward(const Kernel& k, const Inputs& in, const Config& cfg = {});

// A merge kernel's outputs for in (compact, allocated here); std::invalid_argument when the inputs are
// inconsistent or the kernel is not a merge kernel.
MergeOutputs run_merge(const Kernel& k, const MergeInputs& in);
// Whether merge kernel k takes the problem (its dtypes and merge_supports).
bool claims_merge(const Kernel& k, const MergeProblem& p);

// Whether a kernel's device is present on this machine ("cpu" always; "cuda" when built with CUDA and
// a device answers). Callers skip, and report as skipped, the kernels whose device is absent.
bool device_present(const std::string& device);

// Whether k claims (and its supports() accepts) the problem; with Inputs, also their strides.
bool claims(const Kernel& k, const Problem& p);
bool claims(const Kernel& k, const Inputs& in);

// Registration hooks, one per family; registry.cpp calls each (CUDA only when built with it).
void register_cpu_kernels(std::vector<Kernel>& out);
void register_cuda_kernels(std::vector<Kernel>& out);
void register_mutant_kernels(std::vector<Kernel>& out);

}  // namespace fc
