// Mutants of the variants (contract v2): realistic bugs of varlen, paged, windowed, softcapped,
// ALiBi and strided attention, each planted in one kernel that is otherwise cpu_tiled's forward in
// the FA2 loop order (the same operations in the same order, so on every problem the fault does not
// touch it gives cpu_tiled's bits). Forward only: every fault shows in o or lse.
//
// A kernel of its own rather than a seam in cpu_tiled: the faults sit in the visible-key range, the
// gather of K/V and the finalisation, and the correct kernels stay free of fault switches. The
// fault-free form is held to every variant law (properties/tests/variant_laws_test.cpp).
#pragma once

#include <string>
#include <vector>

#include "kernels/registry.hpp"

namespace fc::mutants {

enum class VariantFault {
  None,                  // the correct kernel (not registered)
  WindowRightExclusive,  // the window's right edge exclusive: j < i' + right (window (n, 0) loses the diagonal)
  WindowLeftWide,        // the window's left edge off by one outward: j >= i' - left - 1
  WindowOtherAlignment,  // the window measured from the other causal alignment's row
  SoftcapDropped,        // softcap accepted and never applied
  AlibiForcesCausal,     // ALiBi turns on the causal mask of no mask's alignment (a decoder-only path)
  PageSize128,           // the page index computed with page size 128 whatever the problem says
  VarlenMaxAlignment,    // varlen rows aligned with the batch's longest lengths, not the sequence's own
  StridesIgnored,        // q, k, v read as if contiguous whatever their strides
  ZeroKeysNaN,           // a sequence with no key gives o = 0 / 0 = NaN (no l = 0 guard)
  // Within every error bound, but not the bits the contract promises: a second code path for one
  // variant computes exp in double (each weight within an ulp, as the dense path's), so the variant
  // and the dense problem it equals give different bits. Only the variants' bitwise laws see them.
  VarlenWideExp,    // the varlen path
  PagedWideExp,     // the paged path
  StridedWideExp,   // the path for strided inputs
  WindowWideExp,    // the windowed path
  AlibiWideExp,     // the ALiBi path
  EmptySeqWideExp,  // the path taken when a batch holds a sequence of no query or no key
  MaxOverTile,      // the running max over the whole key tile, keys outside the row's range included
  SoftcapTinyZero,  // softcap's tanh flushes |s / c| < 2^-40 to 0 (an approximate tanh): harmless at
                    // any c near the scores, every score 0 when c is huge
  // The hostile harness's classes (kernels/hostile.hpp, properties/laws_hostile.cpp): harmless on
  // benign memory and a first call, wrong on poisoned bytes or on a later call.
  StrideGapRead,  // a vector load reads one element past each row of a strided q, k or v (a gap) and
                  // weighs it by 0: the row unchanged while gaps hold finite values, NaN on a NaN gap
  PageTailRead,   // each sequence's last page read whole: the slots past the sequence's end join its
                  // last key with weight 0 (0 * x), NaN where they hold NaN
  LayoutByShape,  // q, k, v strides cached by the problem's sizes: a later call of those sizes in other
                  // strides reads its tensors through the first call's strides
  StaleRowSums,   // the rows' running max m and sum l kept in a workspace per shape, reset when
                  // allocated and not on each call: a second call of a shape starts from the first's
  // Attention sinks (contract v3).
  SinkNotInDenominator,  // the sink enters lse but o is normalised by the keys' sum alone
  SinkNotInLse,          // o is right, lse the keys' alone (the backward's P then sums past 1)
  SinkDivides,           // the sinks' path divides o by l where the dense path multiplies by 1 / l: one
                         // rounding fewer, within every bound, but a sink at -inf is not no sink's bits
  // Padded varlen (contract v3) and the output canaries (kernels/hostile.hpp).
  PaddedReadsCu,   // sequences' tokens located by cu_seqlens instead of cu_seqlens_*_padded (reads and
                   // writes the compact positions)
  PaddedWideExp,   // the padded path computes exp in double: right values, not the compact layout's bits
  WritesPastO,     // o's store loop runs one row past the end: the element after o's last is written (0)
  WritesLseGap,    // lse stored as a vector of rows one element wider than the row: the element after each
                   // (batch, head)'s last query is written (-inf), a stride gap of a padded lse
  PageIndexInt16,  // the page table's entries held as int16: a physical page >= 2^15 wraps negative and
                   // reads another page (modulo the pool)
  PageTable16,     // the page table staged 16 entries at a time and never reloaded: column c reads entry
                   // c % 16 (wrong past 16 pages: past 4096 keys with pages of 256)
  // Mask tensors and block masks (contract v3).
  MaskF32AsF16,        // an F32 additive mask read as F16 elements (the first half of its bytes, two
                       // halves per float): the shipped bug that gave 97 % NaN
  MaskHeadStride,      // the mask's head axis read with stride 0, as if broadcast (H_m = 1), when the
                       // mask is per head (H_m = heads_q): every head reads head 0's slice
  MaskBoolInverted,    // a boolean mask read with the opposite convention (true = masked out)
  BlockMaskTransposed, // the block mask read at (key block, query block): the block index transposed
  MaskedRowNaN,        // a row whose every key a mask hides divides 0 by l = 0: o = NaN
  MaskDivides,         // the masked path (a mask tensor or a block mask, one path for both) divides o by l
                       // (the dense path multiplies by 1 / l): a mask equal to causal is not causal's bits
  BlockMaskDivides,    // the block-mask path divides o by l: not the dense mask tensor's bits
};

// The registry row of the kernel with fault f (mutant = f != None): declares every variant.
Kernel make_variant_faulty_kernel(VariantFault f, const std::string& name, const std::string& description);

// The registered variant mutants (mutants.cpp appends them to the mutant table).
void register_variant_mutants(std::vector<Kernel>& out);
// The merge-state and split-KV mutants (merge_mutants.cpp).
void register_merge_mutants(std::vector<Kernel>& out);

}  // namespace fc::mutants
