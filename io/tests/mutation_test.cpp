// A libFuzzer-free "never crash" loop: bounded random mutations of a valid file (flipped bytes,
// truncations, splices, header-length edits). The reader either returns or raises its FileError;
// any other exception fails the test, and a crash or hang fails it too.
#include "tests/catch.hpp"
#include <random>

#include "io/attention_io.hpp"
#include "io/tests/malformed.hpp"

using namespace fc;

namespace {

std::string mutate(const std::string& good, std::mt19937_64& rng) {
  std::string s = good;
  auto pick = [&](size_t n) { return size_t(std::uniform_int_distribution<size_t>(0, n - 1)(rng)); };
  const size_t header_end = std::min(s.size(), size_t(8 + 200));  // most mutations land in the header
  switch (pick(5)) {
    case 0:  // flip a few bytes, mostly in the header
      for (size_t n = 1 + pick(8); n > 0; --n) s[pick(pick(4) ? header_end : s.size())] = char(pick(256));
      break;
    case 1:  // truncate anywhere
      s.resize(pick(s.size()));
      break;
    case 2:  // replace a header byte by a JSON-significant character
      s[8 + pick(header_end - 8)] = "{}[]\",:-0123456789.eE "[pick(22)];
      break;
    case 3:  // splice a chunk of the file onto another position
      s.insert(pick(s.size()), s.substr(pick(s.size()), 1 + pick(16)));
      break;
    default:  // edit the header length
      s[pick(8)] = char(pick(256));
      break;
  }
  return s;
}

}  // namespace

TEST_CASE("the tensor-file reader never crashes on mutated input", "[cpu]") {
  const std::string good = io::testing::good_file(true);
  std::mt19937_64 rng(20260601);
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    const std::string bytes = mutate(good, rng);
    try {
      Inputs in = io::inputs_from("mutant", io::parse_safetensors("mutant", bytes));
      REQUIRE(well_formed(in.p));  // whatever is accepted is a usable problem
      REQUIRE(in.q.bytes.size() == size_t(numel_q(in.p)) * size_t(dtype_size(in.p.dtype)));
      ++accepted;
    } catch (const io::FileError& e) {
      REQUIRE(std::string(e.what()).find('\n') == std::string::npos);
      ++rejected;
    } catch (const std::exception& e) {
      FAIL("iteration " << iter << ": untyped exception " << e.what());
    }
  }
  // The loop must exercise both outcomes, or it tested nothing.
  CHECK(accepted > 0);
  CHECK(rejected > 0);
}
