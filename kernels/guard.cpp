#include "kernels/guard.hpp"

#include <fmt/format.h>

namespace fc {
namespace {

std::string bytes_text(size_t n) { return fmt::format("{} byte{}", n, n == 1 ? "" : "s"); }

}  // namespace

std::string guard_breach(const std::string& name, int64_t numel, int elem_size, const unsigned char* before,
                         const unsigned char* after, size_t guard_bytes) {
  const int64_t es = elem_size > 0 ? elem_size : 1;
  for (size_t x = 0; x < guard_bytes; ++x)  // past the end first: the nearest stray byte
    if (after[x] != kGuardFill)
      return fmt::format("the kernel wrote {} past the end of {}: its element {} ({} past its last, {})",
                         bytes_text(x + 1), name, numel + int64_t(x) / es, int64_t(x) / es + 1,
                         numel > 0 ? "whose index is " + std::to_string(numel - 1) : "it has none");
  for (size_t x = guard_bytes; x-- > 0;)  // before the start: the byte nearest the first element
    if (before[x] != kGuardFill) {
      const size_t back = guard_bytes - x;
      return fmt::format("the kernel wrote {} before the start of {}: its element {}", bytes_text(back), name,
                         -int64_t((int64_t(back) + es - 1) / es));
    }
  return "";
}

}  // namespace fc
