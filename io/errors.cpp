#include "io/errors.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace fc::io {

namespace {
// A message must stay on one line even when a path contains control characters.
std::string one_line(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}
}  // namespace

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string quoted(const std::string& s) {
  using nlohmann::json;
  return json(s).dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
}

const char* fault_name(FileFault f) {
  switch (f) {
    case FileFault::Io: return "io";
    case FileFault::Truncated: return "truncated";
    case FileFault::HeaderPastEnd: return "header_past_end";
    case FileFault::BadJson: return "bad_json";
    case FileFault::BadHeader: return "bad_header";
    case FileFault::BadOffsets: return "bad_offsets";
    case FileFault::UnknownDtype: return "unknown_dtype";
    case FileFault::AbsurdShape: return "absurd_shape";
    case FileFault::SizeMismatch: return "size_mismatch";
    case FileFault::MissingTensor: return "missing_tensor";
    case FileFault::UnknownTensor: return "unknown_tensor";
    case FileFault::WrongRank: return "wrong_rank";
    case FileFault::BadShape: return "bad_shape";
    case FileFault::MixedDtypes: return "mixed_dtypes";
    case FileFault::UnknownMask: return "unknown_mask";
    case FileFault::BadScale: return "bad_scale";
    case FileFault::OutOfRange: return "out_of_range";
    case FileFault::BadMetadata: return "bad_metadata";
    case FileFault::TooLarge: return "too_large";
    case FileFault::BadVariant: return "bad_variant";
  }
  return "?";
}

FileError::FileError(FileFault f, const std::string& file_, const std::string& problem_)
    : std::runtime_error(one_line(fmt::format("{}: {}", file_, problem_))), fault(f), file(file_), problem(problem_) {}

}  // namespace fc::io
