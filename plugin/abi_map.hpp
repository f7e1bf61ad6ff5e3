// The one place where flashcheck's contract meets the plugin ABI (<flashcheck/plugin.h>):
// fc::Problem -> fc_problem, and the suite's host tensors -> DLTensors in one flat buffer (an arena)
// and back. Every variant field of the contract is mapped here and nowhere else; the worker process,
// the in-process runner and the Python bridge all go through these functions.
//
// A call is planned once (CallPlan, plain data, so it crosses the worker pipe as bytes): where each
// tensor lives in the arena, its shape, dtype and strides in the chosen layout. The arena is filled
// with 0xFF (NaN in every float dtype) before the inputs are scattered in, so a kernel that ignores
// strides reads NaN, and everything but the output elements is checked unchanged afterwards (a write
// into padding, past a tensor's end or into an input is a failing case).
#pragma once

#include <flashcheck/plugin.h>

#include <cstdint>
#include <string>
#include <vector>

#include "contract/tensor.hpp"

namespace fc::plugin {

// How q, k, v, o (and d_o, d_q, d_k, d_v) are laid out, in the contract's shapes (dense, varlen or
// paged). Compact: row-major, strides NULL. Bshd: the heads axis and the one before it exchanged in
// storage (dense: a (batch, n, heads, d) buffer, PyTorch's transposed view). Padded: gaps after every
// row, head and batch (row stride > d). The variants' small tensors are always compact.
enum class Layout : int32_t { Compact = 0, Bshd = 1, Padded = 2 };
// Compact: every call compact. Mixed: the layout is a hash of the problem (so every run of one case
// shares it, replays reproduce it, and about two cases in three are non-contiguous).
enum class LayoutPolicy : int32_t { Compact = 0, Mixed = 1 };
const char* layout_name(Layout l);
Layout layout_for(const Problem& p, LayoutPolicy policy);

// One tensor's place in the arena. Plain data.
struct ArenaSlot {
  int32_t present = 0;
  int32_t ndim = 0;
  DLDataType dtype{};
  int32_t has_strides = 0;  // 0: strides NULL (compact row-major)
  int64_t shape[4]{};
  int64_t strides[4]{};  // elements
  uint64_t offset = 0;   // bytes from the arena's start (256-aligned)
  uint64_t span = 0;     // bytes from offset that the tensor's elements (and its gaps) cover
};

enum SlotId : int32_t {
  kQ,
  kK,
  kV,
  kO,
  kLse,
  kCuSeqlensQ,
  kCuSeqlensK,
  kPageTable,
  kAlibi,
  kDo,
  kDq,
  kDk,
  kDv,
  kSinks,      // version 4: fc_problem.sinks
  kMask,       // version 5: fc_problem.mask_tensor
  kBlockMask,  // version 5: fc_problem.block_mask
  kCuSeqlensQPadded,  // version 5: fc_problem.cu_seqlens_q_padded
  kCuSeqlensKPadded,  // version 5: fc_problem.cu_seqlens_k_padded
  kSlots
};
const char* slot_name(int32_t id);

struct CallPlan {
  fc_problem problem{};
  int32_t backward = 0;  // 0: forward (outputs o, lse); 1: backward (outputs d_q, d_k, d_v)
  int32_t layout = 0;    // Layout
  int32_t probing = 0;   // supports() asked by the start-up probe, not for a case (probing_supports())
  ArenaSlot slot[kSlots];
  uint64_t bytes = 0;  // arena size (tensors, their guards)
};

fc_problem to_abi(const Problem& p);
DLDataType dl_dtype(DType t);
// The ABI's dtype codes (enum fc_dtype_code) from the contract's dtype table (its abi column).
int32_t abi_code(DType t);                         // FC_DTYPE_UNKNOWN for a dtype outside the ABI
DType dtype_of_abi(int32_t code, DType dflt);      // dflt for FC_DTYPE_UNKNOWN or a code no dtype has
bool abi_dtype_code(int32_t code);                 // a storage float's code (not FC_DTYPE_UNKNOWN)
int32_t abi_mask_dtype_bits();                     // 1 << code for each kernel float: additive masks' dtypes
std::string abi_dtype_names(bool (*keep)(DType));  // "FC_DTYPE_F16, BF16, F32 or F64"

// Plan a forward (backward = false) or backward call of p in a layout.
CallPlan plan_call(const Problem& p, Layout layout, bool backward);

// The host tensors of one call (contiguous, the suite's shapes). Outputs may be null for inputs.
struct HostArgs {
  const HostTensor *q = nullptr, *k = nullptr, *v = nullptr;
  const HostTensor *o = nullptr, *lse = nullptr, *d_o = nullptr;  // backward: the forward's o and lse
  const HostTensor *cu_q = nullptr, *cu_k = nullptr, *page_table = nullptr, *alibi = nullptr;  // the variants'
  const HostTensor* sinks = nullptr;                                                           // contract v3
  const HostTensor *mask = nullptr, *block_mask = nullptr;                                     // contract v3
  const HostTensor *cu_q_padded = nullptr, *cu_k_padded = nullptr;  // contract v3: padded varlen
};
struct HostOuts {
  HostTensor *o = nullptr, *lse = nullptr, *d_q = nullptr, *d_k = nullptr, *d_v = nullptr;
};

// Fill an arena of plan.bytes: 0xFF everywhere, then the inputs at their strides.
void pack(const CallPlan& plan, const HostArgs& in, unsigned char* arena);
// Gather the outputs from the arena, and hold everything else to `before` (the arena as packed):
// "" or one line naming the first byte the kernel should not have written.
std::string unpack(const CallPlan& plan, const unsigned char* arena, const unsigned char* before, const HostOuts& out);

// The ABI's argument structs over an arena at `base` (nullptr: data NULL, as supports() sees them).
// Shapes and strides point into `plan`, which must outlive the structs.
void make_args(const CallPlan& plan, unsigned char* base, DLDevice dev, fc_forward_args* fwd, fc_backward_args* bwd);
// plan.problem with its version-4 and version-5 tensors (sinks; mask, block_mask; the padded offsets)
// viewed over the same arena.
fc_problem problem_args(const CallPlan& plan, unsigned char* base, DLDevice dev);

}  // namespace fc::plugin
