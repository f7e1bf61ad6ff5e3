// Generated tensor files for tests: good attention inputs, and one bad file per malformed-input case
// (docs/interfaces.md), each with the FileError it must raise and a word its message must contain.
// Shared by the io tests (reader level) and the cli tests (the flashcheck binary as a subprocess).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/errors.hpp"

namespace fc::io::testing {

struct Spec {
  std::string name;
  std::string dtype;  // safetensors spelling; unknown spellings get 1 byte per element
  std::vector<int64_t> shape;
};

// A file with `specs` packed in order, `metadata` as __metadata__, `tweak` applied to the header JSON
// before encoding, and `data_delta` bytes added to (or, negative, cut from) the data buffer.
std::string build_file(const std::vector<Spec>& specs, const nlohmann::json& metadata,
                       const std::function<void(nlohmann::json&)>& tweak = {}, int64_t data_delta = 0);

// Raw bytes: an 8-byte little-endian `header_len` followed by `rest`.
std::string raw_file(uint64_t header_len, const std::string& rest);

// A valid input file: q (1, 2, 3, 4), k and v (1, 1, 5, 4), F16, with d_o when asked.
std::vector<Spec> good_specs(const std::string& dtype = "F16", bool with_d_o = false);
std::string good_file(bool with_d_o = false);

struct BadCase {
  std::string label;    // e.g. "offsets_reversed"
  std::string bytes;    // the whole file
  FileFault fault;      // what the reader must raise
  std::string mention;  // a word the one-line message must contain (case-sensitive)
};
std::vector<BadCase> malformed_cases();

}  // namespace fc::io::testing
