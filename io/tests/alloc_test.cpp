// An absurd shape must be refused before any allocation of its size: this executable replaces the
// global operator new to record the largest single request, and the reader must never ask for more
// than the file itself could hold.
#include "tests/catch.hpp"
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>

#include "io/attention_io.hpp"
#include "io/tests/malformed.hpp"

namespace {
std::atomic<size_t> g_largest{0};
}

// Hand-written on purpose: the only way to observe allocation sizes without an external tool.
void* operator new(size_t n) {
  size_t prev = g_largest.load();
  while (n > prev && !g_largest.compare_exchange_weak(prev, n)) {}
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

using namespace fc;

TEST_CASE("read_inputs refuses an absurd shape fast and without allocating it", "[cpu]") {
  for (const io::testing::BadCase& c : io::testing::malformed_cases()) {
    if (c.fault != io::Fault::AbsurdShape) continue;
    CAPTURE(c.label);
    g_largest = 0;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      io::inputs_from("absurd", io::parse_safetensors("absurd", c.bytes));
      FAIL("accepted");
    } catch (const io::FileError& e) {
      CHECK(e.fault == io::Fault::AbsurdShape);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The largest request is bounded by a small multiple of the file (copying its bytes, JSON nodes).
    CHECK(g_largest.load() <= 64 * c.bytes.size() + 4096);
    CHECK(seconds < 1.0);  // "promptly": an allocation of 2^40 elements alone would take far longer
  }
  // And the tracker works: a file that holds a 1 MiB tensor does allocate about that much.
  g_largest = 0;
  io::parse_safetensors("big", io::testing::build_file({{"x", "F32", {512, 512}}}, nullptr));
  CHECK(g_largest.load() >= size_t(512 * 512 * 4));
}
