// guard_breach (kernels/guard.hpp): untouched guards pass; a changed byte after or before a tensor is
// named by its element, the one nearest the tensor when several changed.
#include "tests/catch.hpp"

#include <string>
#include <vector>

#include "kernels/guard.hpp"

namespace {

struct TestGuards {
  std::vector<unsigned char> before = std::vector<unsigned char>(fc::kGuardBytes, fc::kGuardFill);
  std::vector<unsigned char> after = std::vector<unsigned char>(fc::kGuardBytes, fc::kGuardFill);
  std::string breach(int64_t numel, int elem) const {
    return fc::guard_breach("o", numel, elem, before.data(), after.data());
  }
};

}  // namespace

TEST_CASE("untouched guards are no breach", "[cpu]") {
  TestGuards g;
  CHECK(g.breach(4096, 2).empty());
  CHECK(g.breach(0, 4).empty());
}

TEST_CASE("a write just past the end names the element one past the last", "[cpu]") {
  TestGuards g;
  g.after[0] = 0;
  CHECK(g.breach(4096, 2) ==
        "the kernel wrote 1 byte past the end of o: its element 4096 (1 past its last, whose index is 4095)");
  g.after[0] = fc::kGuardFill;
  g.after[9] = 0x3C;  // byte 9 past the end: element 4 past the last of 2-byte elements
  CHECK(g.breach(4096, 2) ==
        "the kernel wrote 10 bytes past the end of o: its element 4100 (5 past its last, whose index is 4095)");
  g.after[3] = 0;  // the nearer byte is named
  CHECK(g.breach(10, 4) ==
        "the kernel wrote 4 bytes past the end of o: its element 10 (1 past its last, whose index is 9)");
}

TEST_CASE("the last guard byte is watched, and an empty tensor says so", "[cpu]") {
  TestGuards g;
  g.after[fc::kGuardBytes - 1] = 0;
  CHECK(g.breach(0, 4) ==
        "the kernel wrote 256 bytes past the end of o: its element 63 (64 past its last, it has none)");
}

TEST_CASE("a write before the start names a negative element", "[cpu]") {
  TestGuards g;
  g.before[fc::kGuardBytes - 1] = 0;  // the byte just before element 0
  CHECK(g.breach(16, 4) == "the kernel wrote 1 byte before the start of o: its element -1");
  g.before[fc::kGuardBytes - 1] = fc::kGuardFill;
  g.before[0] = 1;  // the guard's first byte: 256 bytes before, element -64 of 4-byte elements
  CHECK(g.breach(16, 4) == "the kernel wrote 256 bytes before the start of o: its element -64");
  g.after[100] = 7;  // past the end is reported first
  CHECK(g.breach(16, 4).find("past the end of o: its element 41") != std::string::npos);
}
