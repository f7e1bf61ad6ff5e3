// A libFuzzer-free "never crash" loop: bounded random mutations of a valid file (flipped bytes,
// truncations, splices, header-length edits). The reader either returns or raises its FileError;
// any other exception fails the test, and a crash or hang fails it too.
#include "tests/catch.hpp"
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>

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

// read_safetensors reads the header, then each tensor straight from the file into its storage;
// parse_safetensors takes the whole file from memory. Both must give the same tensors, or the same
// fault with the same message, on every malformed fixture and on mutated files; and
// read_safetensors_header the same names, dtypes, shapes and metadata with no bytes, or the same error.
TEST_CASE("read_safetensors from a file agrees with parse_safetensors of its bytes", "[cpu]") {
  const auto path =
      std::filesystem::temp_directory_path() / ("fc_io_read_agrees_" + std::to_string(::getpid()) + ".safetensors");
  const std::string name = path.string();
  struct ReadOutcome {
    io::TensorFile file;
    std::string error;  // fault name and message; empty when the file was read
  };
  auto outcome = [&](auto&& read) {
    ReadOutcome o;
    try {
      o.file = read();
    } catch (const io::FileError& e) {
      o.error = std::string(io::fault_name(e.fault)) + ": " + e.what();
    }
    return o;
  };
  std::vector<std::string> files = {io::testing::good_file(true), io::testing::good_file(false)};
  for (const io::testing::BadCase& c : io::testing::malformed_cases()) files.push_back(c.bytes);
  std::mt19937_64 rng(20261208);
  for (int i = 0; i < 2000; ++i) files.push_back(mutate(files[0], rng));
  int read_ok = 0, refused = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    CAPTURE(i);
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(files[i].data(), std::streamsize(files[i].size()));
    }
    const ReadOutcome disk = outcome([&] { return io::read_safetensors(name); });
    const ReadOutcome memory = outcome([&] { return io::parse_safetensors(name, files[i]); });
    const ReadOutcome header = outcome([&] { return io::read_safetensors_header(name); });
    REQUIRE(disk.error == memory.error);
    REQUIRE(header.error == memory.error);
    if (!disk.error.empty()) {
      ++refused;
      continue;
    }
    ++read_ok;
    REQUIRE(disk.file.metadata == memory.file.metadata);
    REQUIRE(disk.file.tensors.size() == memory.file.tensors.size());
    REQUIRE(header.file.metadata == memory.file.metadata);
    REQUIRE(header.file.tensors.size() == memory.file.tensors.size());
    for (const auto& [tensor, x] : memory.file.tensors) {
      const HostTensor& y = disk.file.tensors.at(tensor);
      REQUIRE((y.dtype == x.dtype && y.shape == x.shape && y.bytes == x.bytes));
      const HostTensor& h = header.file.tensors.at(tensor);
      REQUIRE((h.dtype == x.dtype && h.shape == x.shape && h.bytes.empty()));
    }
  }
  std::filesystem::remove(path);
  CHECK(read_ok > 2);  // the good files and some mutants
  CHECK(refused > int(io::testing::malformed_cases().size()) / 2);
}
