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

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::Io: return "io";
    case Fault::Truncated: return "truncated";
    case Fault::HeaderPastEnd: return "header_past_end";
    case Fault::BadJson: return "bad_json";
    case Fault::BadHeader: return "bad_header";
    case Fault::BadOffsets: return "bad_offsets";
    case Fault::UnknownDtype: return "unknown_dtype";
    case Fault::AbsurdShape: return "absurd_shape";
    case Fault::SizeMismatch: return "size_mismatch";
    case Fault::MissingTensor: return "missing_tensor";
    case Fault::UnknownTensor: return "unknown_tensor";
    case Fault::WrongRank: return "wrong_rank";
    case Fault::BadShape: return "bad_shape";
    case Fault::MixedDtypes: return "mixed_dtypes";
    case Fault::UnknownMask: return "unknown_mask";
    case Fault::BadScale: return "bad_scale";
    case Fault::OutOfRange: return "out_of_range";
    case Fault::BadMetadata: return "bad_metadata";
    case Fault::TooLarge: return "too_large";
    case Fault::BadVariant: return "bad_variant";
  }
  return "?";
}

FileError::FileError(Fault f, const std::string& file_, const std::string& problem_)
    : std::runtime_error(one_line(fmt::format("{}: {}", file_, problem_))), fault(f), file(file_), problem(problem_) {}

}  // namespace fc::io
