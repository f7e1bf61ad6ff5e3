// The hostile harness's memory: every byte a kernel must not read holds NaN when it is called. A
// strided view's gaps (padding between rows, heads and batches, the elements a step of 2 skips, the
// storage before the offset) and the slots of paged K/V that no sequence's keys occupy (spare pages,
// the last page's slots past its sequence's end) and the padding tokens of padded varlen (between a
// sequence's end and the next sequence's padded start, and before the first) are filled with the all-ones bit pattern, a NaN in
// F16, BF16, F32 and F64 (the plugin arena's fill, plugin/abi_map.hpp). A kernel that reads
// them and multiplies by a zero weight (0 · NaN) or adds them under a mask turns a row NaN; a
// correct kernel's bits do not change. verdict/execute.cpp calls every kernel on these inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "contract/tensor.hpp"

namespace fc {

// The storage elements of t that no logical element addresses (none for a compact tensor).
std::vector<int64_t> unaddressed_elements(const HostTensor& t);

// What poison() filled: storage elements of stride gaps, and logical elements of unused page slots and
// of padding tokens.
struct PoisonCount {
  int64_t gaps = 0;
  int64_t page_slots = 0;
  int64_t padding = 0;
  int64_t total() const { return gaps + page_slots + padding; }
};

// in with NaN in every byte the contract lets no kernel read; the values a kernel may read unchanged.
// `count` (optional) receives how many elements were poisoned.
Inputs poison(const Inputs& in, PoisonCount* count = nullptr);
// Whether poison(in) differs from in (a strided tensor with gaps, paged K/V with unused slots, padded
// varlen with padding tokens).
bool has_poisonable(const Inputs& in);

// Output canaries: the built-in kernels' counterpart of the plugin arena's guards. An output is handed
// to the kernel in a guarded storage: kOutputGuard elements of canary (the all-ones pattern, NaN) before
// its first element and after its last, canaries in the gaps of a strided layout (`gaps`: one element
// after every innermost row, a padded row stride), and canaries on the elements no kernel may write
// (`untouched`, logical and row-major: padded varlen's padding tokens; empty: none). A function over
// host buffers, so a device kernel's outputs copied back whole are checked the same way.
inline constexpr int64_t kOutputGuard = 16;
// t's values (compact or not) in a guarded storage.
HostTensor guard_output(const HostTensor& t, bool gaps, const std::vector<bool>& untouched);
// "" when every canary of g (from guard_output; any other layout: std::invalid_argument) still holds
// its bytes, else one line naming `name` and the element next to the first changed one; element(flat)
// names a logical element ("o[token=3,h=0,c=1]").
std::string check_output_guard(const HostTensor& g, const std::string& name, const std::vector<bool>& untouched,
                               const std::function<std::string(int64_t)>& element);
// g's values (g from guard_output), compact, with the untouched elements 0 (as the references leave them).
HostTensor unguard_output(const HostTensor& g, const std::vector<bool>& untouched);
// The logical elements of output `tensor` ("o", "lse", "d_q", "d_k", "d_v") on padding tokens of a
// padded varlen problem (empty when there are none).
std::vector<bool> padding_elements(const Inputs& in, const std::string& tensor);

// Where a kernel that lays out its own tensors (a plugin: abi_map's layout_for) rotates the layout it
// would choose for a problem, on this thread: 0 outside a LayoutShift. The consecutive_calls law
// calls one problem in two layouts this way.
int layout_shift();
class LayoutShift {
 public:
  explicit LayoutShift(int by);
  ~LayoutShift();
  LayoutShift(const LayoutShift&) = delete;
  LayoutShift& operator=(const LayoutShift&) = delete;

 private:
  int previous_;
};

}  // namespace fc
