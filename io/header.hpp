// The safetensors header, parsed as a stream (nlohmann-json's SAX interface) against the format's
// fixed structure instead of into a JSON document: an object of tensor entries
// {"dtype": string, "shape": [uint...], "data_offsets": [uint, uint]} and one "__metadata__"
// object of strings. Anything else is refused at the first event that breaks the structure, so
// memory stays linear in the header's size with a small constant and nesting never goes deeper than
// three levels, whatever the file holds (a DOM parse of 100 MB of nested JSON takes gigabytes).
// Duplicate keys, at any level, are errors: JSON leaves them undefined and "last one wins" would
// let a file say two things at once.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace fc::io {

// At most this many tensors and metadata entries in one header (an attention file has ten).
constexpr size_t kMaxHeaderEntries = 4096;
constexpr size_t kMaxRank = 16;

struct HeaderEntry {
  std::string name;
  std::string dtype;            // as spelled in the file; validated by the caller
  std::vector<uint64_t> shape;  // at most kMaxRank dimensions
  uint64_t begin = 0, end = 0;  // data_offsets
};

struct Header {
  std::vector<HeaderEntry> entries;  // in file order
  std::map<std::string, std::string> metadata;
};

// Parses `json` (the header bytes of file `name`); every problem is a FileError (BadJson, BadHeader
// or AbsurdShape) with a one-line message.
Header parse_header(const std::string& name, std::string_view json);

}  // namespace fc::io
