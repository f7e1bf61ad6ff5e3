// Output guards: every output a kernel writes sits between two guards of kGuardBytes bytes that hold
// kGuardFill (the all-ones pattern, a NaN in F16, BF16, F32 and F64, as the plugin arena's fill,
// plugin/abi_map.cpp), and starts filled with it too. After the call, a guard byte that
// changed is a write outside the tensor; guard_breach names the element. The CUDA kernels' host glue
// (kernels/cuda/cuda_kernels.cpp) places o, lse, d_q, d_k and d_v so. Host only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fc {

inline constexpr unsigned char kGuardFill = 0xFF;
inline constexpr size_t kGuardBytes = 256;  // a multiple of every alignment a kernel asks of a tensor's start

// One line naming the element next to the stray write nearest the tensor `name` (numel elements of
// elem_size bytes): in `before`, the guard_bytes ending at its first byte, or in `after`, the guard_bytes
// starting past its last; "" when every byte of both is kGuardFill.
std::string guard_breach(const std::string& name, int64_t numel, int elem_size, const unsigned char* before,
                         const unsigned char* after, size_t guard_bytes = kGuardBytes);

}  // namespace fc
