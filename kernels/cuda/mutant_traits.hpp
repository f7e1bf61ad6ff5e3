// The CUDA mutants: realistic faults of a Hopper / Ampere attention kernel, planted into the real
// kernels (tiled_forward.cu, tiled_backward.cu, wgmma_forward.cu, wgmma_backward.cu) through their last
// template parameter, `Fault kFault = Fault::None`. A kernel body reads what a fault changes from
// FaultTraits<kFault>, whose members name behaviours (the stages a ring wraps at, whether a wait or a
// barrier is there); FaultTraits<Fault::None> is the production kernel's, so the correct kernels' device
// code is the same bytes with or without this file (scripts/sass_dump.sh, docs/cuda-mutants.md). Each
// mutant is instantiated for one dtype, head dim and tile only (nvcc's build time); the rest of its
// kernel pair (the forward of a backward fault, and the reverse) is the correct kernel. The registry
// rows (mutant = true) come from cuda_mutants.cpp. Host and device.
#pragma once

#include "kernels/cuda/launchers.hpp"

namespace fc::cuda {

enum class Fault : int {
  None = 0,
  TiledNoSync,        // cuda_tiled forward: no __syncthreads after cp.async.wait_group (a race)
  TiledTail,          // cuda_tiled forward: the last partial key tile read and used without the n_k predicate
  TiledCausalSkip,    // cuda_tiled forward: the causal walk one key tile short
  TiledOffset32,      // cuda_tiled forward: head offsets of q, k, v, o, lse in 32 bits
  TiledDqPlainAdd,    // cuda_tiled backward: d_q += by a plain load-add-store instead of an atomic
  TiledStorePastEnd,  // cuda_tiled forward: the o / lse row predicate off by one (row n_q is written)
  TiledDqAccPad32,    // cuda_tiled backward: a d_q accumulator padded to 128 rows per head, offsets in 32 bits
  WgmmaSkipKFull,     // cuda_wgmma forward: S GEMMs issued without waiting on k_full (a race with the TMA)
  WgmmaRingWrap,      // cuda_wgmma forward: the consumers' stage index wraps at 3, not 2
  WgmmaNoRescale,     // cuda_wgmma forward: consumer warpgroup 1 never rescales o
  WgmmaDsNoSwizzle,   // cuda_wgmma backward: dS^T stored without the 128-byte swizzle its GEMM reads
  WgmmaDsSyncScope,   // cuda_wgmma backward: the barrier before the d_q GEMM spans one warpgroup (a race)
};

// What a kernel does where a fault may change it: the production kernel's behaviour, which a fault's
// specialisation below changes in one member. Kernel bodies read `using F = FaultTraits<kFault>` and
// branch (if constexpr) on these names only, never on a Fault.
template <Fault kFault>
struct FaultTraits {
  // cuda_tiled forward
  static constexpr bool kSyncAfterCopies = true;   // a __syncthreads after cp.async.wait_group
  static constexpr bool kKeyTailPredicate = true;  // rows past n_k of a partial key tile: zeros, masked
  static constexpr int kCausalTilesShort = 0;      // key tiles the causal walk stops short of its end
  static constexpr bool kHeadOffsets32 = false;    // head offsets of q, k, v in 32-bit int arithmetic
  static constexpr bool kStoreRowPastEnd = false;  // the o / lse row predicate i > n_q (row n_q written)
  // cuda_tiled backward
  static constexpr bool kDqAtomicAdd = true;     // d_q += by atomics (else a plain load-add-store)
  static constexpr bool kDqAccPadded32 = false;  // a d_q accumulator of round_up(n_q, 128) rows per
                                                 // head, its offset in 32-bit int arithmetic
  // cuda_wgmma forward
  static constexpr bool kWaitKFull = true;         // the S GEMMs wait on the stage's k_full
  static constexpr int kRingStages = 2;            // the consumers' k/v stage index wraps at this
  static constexpr int kUnrescaledWarpgroup = -1;  // the consumer warpgroup that never rescales o (-1: none)
  // cuda_wgmma backward
  static constexpr bool kDsSwizzled = true;             // dS^T stored 128-byte swizzled, as its GEMM reads it
  static constexpr bool kDqBarrierAllConsumers = true;  // the barrier before the d_q GEMM spans every consumer
  static constexpr unsigned kConsumer1DsDelayNs = 0;    // consumer 1 stores its dS^T rows this late
};
template <>
struct FaultTraits<Fault::TiledNoSync> : FaultTraits<Fault::None> {
  static constexpr bool kSyncAfterCopies = false;
};
template <>
struct FaultTraits<Fault::TiledTail> : FaultTraits<Fault::None> {
  static constexpr bool kKeyTailPredicate = false;
};
template <>
struct FaultTraits<Fault::TiledCausalSkip> : FaultTraits<Fault::None> {
  static constexpr int kCausalTilesShort = 1;
};
template <>
struct FaultTraits<Fault::TiledOffset32> : FaultTraits<Fault::None> {
  static constexpr bool kHeadOffsets32 = true;
};
template <>
struct FaultTraits<Fault::TiledDqPlainAdd> : FaultTraits<Fault::None> {
  static constexpr bool kDqAtomicAdd = false;
};
template <>
struct FaultTraits<Fault::TiledStorePastEnd> : FaultTraits<Fault::None> {
  static constexpr bool kStoreRowPastEnd = true;
};
template <>
struct FaultTraits<Fault::TiledDqAccPad32> : FaultTraits<Fault::None> {
  static constexpr bool kDqAccPadded32 = true;
};
template <>
struct FaultTraits<Fault::WgmmaSkipKFull> : FaultTraits<Fault::None> {
  static constexpr bool kWaitKFull = false;
};
template <>
struct FaultTraits<Fault::WgmmaRingWrap> : FaultTraits<Fault::None> {
  static constexpr int kRingStages = 3;  // 0, 1, 2, 0, ...: stage 2 of k is v's first, stage 2 of v the scratch
};
template <>
struct FaultTraits<Fault::WgmmaNoRescale> : FaultTraits<Fault::None> {
  static constexpr int kUnrescaledWarpgroup = 1;
};
template <>
struct FaultTraits<Fault::WgmmaDsNoSwizzle> : FaultTraits<Fault::None> {
  static constexpr bool kDsSwizzled = false;
};
template <>
struct FaultTraits<Fault::WgmmaDsSyncScope> : FaultTraits<Fault::None> {
  static constexpr bool kDqBarrierAllConsumers = false;
  // The race shows on every step, not only when the scheduler happens to skew the two consumers:
  // consumer 1 stores its dS^T rows 20 us late, after consumer 0 has read them.
  static constexpr unsigned kConsumer1DsDelayNs = 20000;
};

// The launcher whose kernel carries the fault.
enum class FaultSite { TiledForward, TiledBackward, WgmmaForward, WgmmaBackward };

struct CudaMutant {
  const char* name;         // the registry name
  const char* description;  // one line
  Fault fault;
  FaultSite site;
  DType dtype;  // the one dtype, head dim and tile pair it is built for
  int d;
  Tile forward;        // the registry's one config
  Tile backward;       // the backward tile that runs with it
  bool race;           // a missing barrier or wait: compute-sanitizer racecheck may see it too
  bool large_offsets;  // claims tensors past 2^31 elements, as its base kernel does (the large_offsets law)
};

// One row per fault. The tiles are ones the base kernel lists (tiled_traits.hpp, wgmma_traits.hpp).
// One mutant per row, its build on one line.
// clang-format off
inline constexpr CudaMutant kCudaMutants[] = {
    {"cuda_mutant_tiled_no_sync",
     "cuda_tiled forward without the __syncthreads after cp.async.wait_group: a warp reads q and k rows other "
     "threads' copies have not landed",
     Fault::TiledNoSync, FaultSite::TiledForward, DType::F16, 64, {128, 64}, {64, 64}, true, false},
    {"cuda_mutant_tiled_tail",
     "cuda_tiled forward with no n_k predicate on the last partial key tile: it reads and weighs the next head's keys",
     Fault::TiledTail, FaultSite::TiledForward, DType::BF16, 128, {128, 32}, {32, 64}, false, false},
    {"cuda_mutant_tiled_causal_skip",
     "cuda_tiled forward whose causal walk stops one key tile short: the diagonal tile is skipped",
     Fault::TiledCausalSkip, FaultSite::TiledForward, DType::F16, 128, {64, 64}, {64, 64}, false, false},
    {"cuda_mutant_tiled_offset32",
     "cuda_tiled forward computing head offsets in 32 bits: they wrap once a tensor passes 2^31 elements",
     Fault::TiledOffset32, FaultSite::TiledForward, DType::F16, 128, {128, 64}, {64, 128}, false, true},
    {"cuda_mutant_tiled_dq_plain_add",
     "cuda_tiled backward adding d_q by a plain load-add-store: key tiles' CTAs lose each other's contributions",
     Fault::TiledDqPlainAdd, FaultSite::TiledBackward, DType::BF16, 64, {128, 64}, {64, 64}, false, false},
    {"cuda_mutant_tiled_store_past_end",
     "cuda_tiled forward whose o / lse row predicate is i > n_q, not i >= n_q: row n_q is written, the next head's "
     "first row or, in the last head, one row past the end of o and one element past the end of lse",
     Fault::TiledStorePastEnd, FaultSite::TiledForward, DType::F16, 64, {128, 64}, {64, 64}, false, false},
    {"cuda_mutant_tiled_dq_acc_pad32",
     "cuda_tiled backward with FlashAttention-2's d_q accumulator, padded to 128 rows per head, indexed in 32-bit "
     "int arithmetic: the offset wraps once b h round_up(n_q, 128) d passes 2^31, while no tensor does",
     Fault::TiledDqAccPad32, FaultSite::TiledBackward, DType::F16, 128, {64, 64}, {64, 64}, false, false},
    {"cuda_mutant_wgmma_skip_k_full",
     "cuda_wgmma forward issuing S = q k_n^T without waiting on k_full: the stage may still hold k_{n-2} or k_n "
     "half-landed",
     Fault::WgmmaSkipKFull, FaultSite::WgmmaForward, DType::F16, 128, {128, 128}, {64, 128}, true, false},
    {"cuda_mutant_wgmma_ring_wrap",
     "cuda_wgmma forward whose consumers' k/v stage index wraps at 3 instead of 2: key tile 2 reads past the ring",
     Fault::WgmmaRingWrap, FaultSite::WgmmaForward, DType::BF16, 64, {128, 64}, {128, 128}, false, false},
    {"cuda_mutant_wgmma_no_rescale",
     "cuda_wgmma forward in which consumer warpgroup 1 never rescales o when its running max grows",
     Fault::WgmmaNoRescale, FaultSite::WgmmaForward, DType::F16, 64, {192, 64}, {128, 128}, false, false},
    {"cuda_mutant_wgmma_ds_no_swizzle",
     "cuda_wgmma backward storing dS^T row-major where the d_q GEMM's descriptor reads it 128-byte swizzled",
     Fault::WgmmaDsNoSwizzle, FaultSite::WgmmaBackward, DType::F16, 128, {128, 128}, {64, 128}, false, false},
    {"cuda_mutant_wgmma_ds_sync_scope",
     "cuda_wgmma backward whose barrier before the d_q GEMM spans its own warpgroup only: it reads the other "
     "consumer's dS^T rows before they are stored (consumer 1 stores 20 us late, so the race shows every step)",
     Fault::WgmmaDsSyncScope, FaultSite::WgmmaBackward, DType::BF16, 64, {128, 128}, {128, 128}, true, false},
};
// clang-format on

// The workspace of Fault::TiledDqAccPad32: the real backward's, then (from a 256-byte boundary) the
// padded accumulator, b h_q round_up(n_q, 128) d floats (tiled_backward.cu).
size_t padded_dq_workspace_offset(const Problem& p);
size_t padded_dq_workspace_bytes(const Problem& p);

// The faulty launchers, one per site (the .cu file of the kernel): run mutant kCudaMutants[i]'s fault
// on its one instantiation. cudaErrorInvalidValue for a fault of another site or a problem of
// another dtype or head dim.
cudaError_t tiled_forward_mutant(Fault f, const Problem& p, const ForwardArgs& a, cudaStream_t stream);
cudaError_t tiled_backward_mutant(Fault f, const Problem& p, const BackwardArgs& a, void* workspace,
                                  cudaStream_t stream);
cudaError_t wgmma_forward_mutant(Fault f, const Problem& p, const ForwardArgs& a, cudaStream_t stream);
cudaError_t wgmma_backward_mutant(Fault f, const Problem& p, const BackwardArgs& a, void* workspace,
                                  cudaStream_t stream);

}  // namespace fc::cuda
