// A compact FlashAttention-2 emulation (online softmax over kBlockN key tiles, fp32 accumulation,
// P and dS rounded to storage before their GEMMs, backward by recomputation from lse) with one
// planted fault switched on by a parameter. Each mutant in mutants.cpp is this kernel with one
// TiledFault: a single realistic bug, everything else as a correct kernel does it.
//
// Hand-written rather than wrapping cpu_tiled because most faults sit inside its inner loop (a
// missing rescale, a wrong shift, a dropped tile), where cpu_tiled offers no seam; keeping one small
// kernel whose fault-free form is tested to pass every law makes each mutant an honest one-line
// deviation.
#pragma once

#include <string>

#include "kernels/registry.hpp"

namespace fc::mutants {

enum class TiledFault {
  None,                 // the correct kernel (not registered; the tests hold it to every law)
  NoORescale,           // o not rescaled when the running max grows
  NoLRescale,           // l not rescaled when the running max grows
  OtherCausal,          // top-left and bottom-right causal alignments swapped
  NoMaxSub,             // exp(s) without subtracting the running max
  DropLastPartialTile,  // the last, partial KV tile is skipped
  LseFirstTileMax,      // lse = m of the first tile + log l
  Fp16RunningSum,       // l accumulated in fp16
  ScaleTwice,           // s = scale^2 q.k
  DFromV,               // backward D_i = d_o_i . v_i instead of d_o_i . o_i
  DkNoScale,            // d_k without the scale
  MaskedRowNaN,         // no l = 0 guard: a fully masked row gives 0/0
  GqaModulo,            // query head h reads kv head h % heads_kv
  PBf16,                // P rounded to bf16 (not the fp16 storage) before P.V
  MaskedProducts,       // backward: a tile's masked pairs multiplied through with P = 0 (0 * inf = NaN)
  // Faults within the error bound that break what a kernel declares exact (KernelInfo::exact):
  TailRowsPrescaled,  // rows of the last partial query tile scale q before the dot product
  MaxInStorage,       // the running max kept in the storage type (exp(s - m) with m rounded)
  TailKeysScale,      // the last partial key tile scored with a scale one ulp off
  AccRoundDown,       // the P.V accumulator rounds toward -inf (a directed-rounding add)
  FastLog,            // lse = m + log(l) from a fast log biased by -2^-22 (not exact at 1)
  UnderflowForgetsL,  // when exp(m_old - m_new) underflows to 0, o is reset but l is not
  RacyDq,             // d_q summed over key tiles in arrival order, which changes run to run
  AdditiveMask,       // masked keys of a row's last tile scored s - 10^4 (an additive mask) and kept
  ExpEarlyOut,        // exp(x) taken as 0 for x < -60 (an early-out for negligible weights)
  AccToStorage,       // the unnormalised o converted to the storage type before dividing by l
};

inline constexpr int32_t kDefaultBlock = 16;  // kBlockM = kBlockN when a Config leaves them 0

void faulty_forward(TiledFault f, const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k,
                    const HostTensor& v, HostTensor& o, HostTensor& lse);
void faulty_backward(TiledFault f, const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k,
                     const HostTensor& v, const HostTensor& o, const HostTensor& lse, const HostTensor& d_o,
                     HostTensor& d_q, HostTensor& d_k, HostTensor& d_v);

// The registry row of the kernel with fault f (mutant = f != TiledFault::None).
Kernel make_faulty_kernel(TiledFault f, const std::string& name, const std::string& description);

}  // namespace fc::mutants
