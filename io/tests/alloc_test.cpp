// An absurd shape must be refused before any allocation of its size, and a hostile header parsed in
// memory linear in its size: this executable replaces the global operator new to record the largest
// single request and the peak of live bytes, and the reader must never ask for more than the file
// itself could hold.
#include "tests/catch.hpp"
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "io/attention_io.hpp"
#include "io/tests/malformed.hpp"

namespace {
std::atomic<size_t> g_largest{0};
std::atomic<size_t> g_live{0}, g_peak{0};  // bytes allocated and not yet freed; their maximum
constexpr size_t kPrefix = 16;             // each block records its size in front (keeps 16-byte alignment)
}  // namespace

// Hand-written on purpose: the only way to observe allocation sizes without an external tool.
void* operator new(size_t n) {
  size_t prev = g_largest.load();
  while (n > prev && !g_largest.compare_exchange_weak(prev, n)) {}
  auto* p = static_cast<unsigned char*>(std::malloc(n + kPrefix));
  if (!p) throw std::bad_alloc();
  *reinterpret_cast<size_t*>(p) = n;
  const size_t live = g_live += n;
  size_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {}
  return p + kPrefix;
}
void operator delete(void* q) noexcept {
  if (!q) return;
  auto* p = static_cast<unsigned char*>(q) - kPrefix;
  g_live -= *reinterpret_cast<size_t*>(p);
  std::free(p);
}
void operator delete(void* q, size_t) noexcept { operator delete(q); }
// The nothrow pair too (std::stable_sort's temporary buffer takes it and frees it with the plain
// delete above): a sanitizer's own nothrow new would hand that delete a block without the prefix.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* q, const std::nothrow_t&) noexcept { operator delete(q); }

using namespace fc;

TEST_CASE("read_inputs refuses an absurd shape fast and without allocating it", "[cpu]") {
  for (const io::testing::BadCase& c : io::testing::malformed_cases()) {
    if (c.fault != io::FileFault::AbsurdShape) continue;
    CAPTURE(c.label);
    g_largest = 0;
    try {
      io::inputs_from("absurd", io::parse_safetensors("absurd", c.bytes));
      FAIL("accepted");
    } catch (const io::FileError& e) {
      CHECK(e.fault == io::FileFault::AbsurdShape);
    }
    // The largest request is bounded by a small multiple of the file (copying its bytes, JSON nodes).
    CHECK(g_largest.load() <= 64 * c.bytes.size() + 4096);
  }
  // And the tracker works: a file that holds a 1 MiB tensor does allocate about that much.
  g_largest = 0;
  io::parse_safetensors("big", io::testing::build_file({{"x", "F32", {512, 512}}}, nullptr));
  CHECK(g_largest.load() >= size_t(512 * 512 * 4));
}

TEST_CASE("parse_safetensors refuses a hostile header fast and in memory linear in its size", "[cpu]") {
  // 32 MiB of header each; a document parse of the nested ones takes tens of bytes per byte.
  const size_t kBytes = size_t(32) << 20;
  auto repeat = [&](const std::string& unit, const std::string& tail = "") {
    std::string s;
    s.reserve(kBytes + tail.size());
    while (s.size() + unit.size() <= kBytes) s += unit;
    return s + tail;
  };
  std::string shape_ones = R"({"q":{"dtype":"F16","data_offsets":[0,0],"shape":[)" + repeat("1,") + "1]}}";
  std::string many = "{";
  for (int i = 0; many.size() < kBytes; ++i)
    many += "\"t" + std::to_string(i) + R"(":{"dtype":"F16","shape":[0],"data_offsets":[0,0]},)";
  many.back() = '}';
  const std::vector<std::pair<std::string, std::string>> headers = {
      {"nested objects", repeat(R"({"a":)")},
      {"nested arrays", repeat("[")},
      {"nested in an entry", R"({"q":)" + repeat(R"({"dtype":)")},
      {"a rank of millions", shape_ones},
      {"many tensors", many},
  };
  for (const auto& [label, header] : headers) {
    CAPTURE(label);
    const std::string bytes = io::testing::raw_file(header.size(), header);
    const size_t base = g_live.load();
    g_peak = base;
    try {
      io::parse_safetensors("hostile", bytes);
      FAIL("accepted");
    } catch (const io::FileError& e) {
      CHECK((e.fault == io::FileFault::BadHeader || e.fault == io::FileFault::AbsurdShape ||
             e.fault == io::FileFault::BadJson));
    }
    // Refused at the first departure, no document built: what is kept is at most kMaxHeaderEntries
    // small entries.
    CHECK(g_peak.load() - base <= (size_t(4) << 20));
  }
  // A long metadata value is legal: the lexer's buffers cost a small multiple of its size, not tens.
  const std::string meta = R"({"__metadata__":{"note":")" + repeat("x", "\"}}");
  const std::string bytes = io::testing::raw_file(meta.size(), meta);
  const size_t base = g_live.load();
  g_peak = base;
  CHECK(io::parse_safetensors("long", bytes).metadata.at("note").size() + 2 >= kBytes);
  CHECK(g_peak.load() - base <= 6 * meta.size());
}
