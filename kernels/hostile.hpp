// The hostile harness's memory: every byte a kernel must not read holds NaN when it is called. A
// strided view's gaps (padding between rows, heads and batches, the elements a step of 2 skips, the
// storage before the offset) and the slots of paged K/V that no sequence's keys occupy (spare pages,
// the last page's slots past its sequence's end) are filled with the all-ones bit pattern, a NaN in
// F16, BF16, F32 and F64 (the plugin arena's fill, kernels/plugin/abi_map.hpp). A kernel that reads
// them and multiplies by a zero weight (0 · NaN) or adds them under a mask turns a row NaN; a
// correct kernel's bits do not change. properties/execute.cpp calls every kernel on these inputs.
#pragma once

#include <cstdint>

#include "kernels/tensor.hpp"

namespace fc {

// The storage elements of t that no logical element addresses (none for a compact tensor).
std::vector<int64_t> unaddressed_elements(const HostTensor& t);

// What poison() filled: storage elements of stride gaps, and logical elements of unused page slots.
struct PoisonCount {
  int64_t gaps = 0;
  int64_t page_slots = 0;
  int64_t total() const { return gaps + page_slots; }
};

// in with NaN in every byte the contract lets no kernel read; the values a kernel may read unchanged.
// `count` (optional) receives how many elements were poisoned.
Inputs poison(const Inputs& in, PoisonCount* count = nullptr);
// Whether poison(in) differs from in (a strided tensor with gaps, or paged K/V with unused slots).
bool has_poisonable(const Inputs& in);

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
