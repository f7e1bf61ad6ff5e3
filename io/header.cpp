#include "io/header.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "io/errors.hpp"

namespace fc::io {
namespace {

using nlohmann::json;

// Where the parser stands in the header's fixed structure.
enum class At { Start, Top, Entry, Shape, Offsets, Meta, Done };
enum class Field { None, Dtype, Shape, Offsets };

// One SAX event handler per header. Every handler returns true (go on) or throws the FileError that
// describes the first departure from the structure; nlohmann-json never builds a document.
class HeaderSax final : public nlohmann::json_sax<json> {
 public:
  explicit HeaderSax(const std::string& file) : file_(file) {}
  Header header;

  bool null() override { return scalar("null"); }
  bool boolean(bool) override { return scalar("a boolean"); }
  bool number_integer(number_integer_t v) override { return v >= 0 ? count(uint64_t(v)) : scalar("negative"); }
  bool number_unsigned(number_unsigned_t v) override { return count(v); }
  bool number_float(number_float_t, const string_t&) override { return scalar("a non-integer number"); }
  bool binary(binary_t&) override { return scalar("binary"); }

  bool string(string_t& s) override {
    if (at_ == At::Entry && field_ == Field::Dtype) return entry_.dtype = std::move(s), field_ = Field::None, true;
    if (at_ == At::Meta) return header.metadata.emplace(key_, std::move(s)), true;
    return scalar("a string");
  }

  bool key(string_t& k) override {
    if (at_ == At::Top) {
      if (!top_keys_.insert(k).second) fail(FileFault::BadHeader, fmt::format("duplicate key {}", io::quoted(k)));
      if (top_keys_.size() > kMaxHeaderEntries + 1)
        fail(FileFault::BadHeader, fmt::format("more than {} tensors", kMaxHeaderEntries));
    } else if (at_ == At::Entry) {
      field_ = k == "dtype"          ? Field::Dtype
               : k == "shape"        ? Field::Shape
               : k == "data_offsets" ? Field::Offsets
                                     : Field::None;
      if (field_ == Field::None) fail_entry(fmt::format("unexpected field {}", io::quoted(k)));
      if (!fields_.insert(k).second) fail_entry(fmt::format("duplicate field {}", io::quoted(k)));
      return true;
    } else if (at_ == At::Meta) {
      if (header.metadata.count(k)) fail(FileFault::BadHeader, fmt::format("duplicate metadata key {}", io::quoted(k)));
      if (header.metadata.size() >= kMaxHeaderEntries)
        fail(FileFault::BadHeader, fmt::format("more than {} metadata entries", kMaxHeaderEntries));
    }
    key_ = std::move(k);
    return true;
  }

  bool start_object(std::size_t) override {
    if (at_ == At::Start) return at_ = At::Top, true;
    if (at_ == At::Top && key_ == "__metadata__") return at_ = At::Meta, true;
    if (at_ == At::Top) {
      entry_ = HeaderEntry{key_, {}, {}, 0, 0};
      fields_.clear();
      return at_ = At::Entry, true;
    }
    return scalar("an object");
  }

  bool end_object() override {
    if (at_ == At::Meta) return at_ = At::Top, true;
    if (at_ == At::Top) return at_ = At::Done, true;
    // At::Entry: the only other object the structure admits.
    if (fields_.size() != 3) fail_entry("needs \"dtype\", \"shape\" and \"data_offsets\"");
    header.entries.push_back(std::move(entry_));
    return at_ = At::Top, true;
  }

  bool start_array(std::size_t) override {
    if (at_ == At::Entry && field_ == Field::Shape) return at_ = At::Shape, true;
    if (at_ == At::Entry && field_ == Field::Offsets) return at_ = At::Offsets, offsets_ = 0, true;
    return scalar("an array");
  }

  bool end_array() override {
    if (at_ == At::Offsets && offsets_ != 2) fail_entry(kOffsetsShape);
    at_ = At::Entry;  // only shape and data_offsets arrays are ever opened
    field_ = Field::None;
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    fail(FileFault::BadJson, fmt::format("header is not valid JSON (at byte {} of the header)", position));
  }

 private:
  static constexpr const char* kOffsetsShape = "data_offsets is not [begin, end] of non-negative integers";

  [[noreturn]] void fail(FileFault f, const std::string& what) const { throw FileError(f, file_, what); }
  [[noreturn]] void fail_entry(const std::string& what, FileFault f = FileFault::BadHeader) const {
    fail(f, fmt::format("tensor {}: {}", io::quoted(entry_.name), what));
  }

  // A non-negative integer: a dimension of a shape, or one of the two data offsets.
  bool count(uint64_t v) {
    if (at_ == At::Shape) {
      if (entry_.shape.size() == kMaxRank)
        fail_entry(fmt::format("rank above {} is absurd", kMaxRank), FileFault::AbsurdShape);
      return entry_.shape.push_back(v), true;
    }
    if (at_ == At::Offsets) {
      if (offsets_ == 2) fail_entry(kOffsetsShape);
      (offsets_++ == 0 ? entry_.begin : entry_.end) = v;
      return true;
    }
    return scalar("a number");
  }

  // A value where the structure wants something else: the message says what was expected there.
  bool scalar(const char* what) {
    switch (at_) {
      case At::Start: fail(FileFault::BadHeader, "header is not a JSON object");
      case At::Top:
        if (key_ == "__metadata__") fail(FileFault::BadHeader, "__metadata__ is not an object");
        entry_.name = key_;
        fail_entry("header entry is not an object");
      case At::Entry:
        if (field_ == Field::Dtype) fail_entry("dtype is not a string");
        if (field_ == Field::Shape) fail_entry("shape is not an array");
        fail_entry(kOffsetsShape);
      case At::Shape: fail_entry(fmt::format("shape holds a non-integer or negative dimension ({})", what));
      case At::Offsets: fail_entry(kOffsetsShape);
      case At::Meta: fail(FileFault::BadHeader, fmt::format("metadata {} is not a string", io::quoted(key_)));
      case At::Done: break;
    }
    fail(FileFault::BadJson, "header is not valid JSON");
  }

  const std::string& file_;
  At at_ = At::Start;
  Field field_ = Field::None;
  std::string key_;
  HeaderEntry entry_;
  std::set<std::string> top_keys_, fields_;
  int offsets_ = 0;
};

}  // namespace

Header parse_header(const std::string& name, std::string_view bytes) {
  HeaderSax sax(name);
  // strict: the whole header is one JSON value (trailing spaces are the format's padding).
  json::sax_parse(bytes.begin(), bytes.end(), &sax, json::input_format_t::json, /*strict=*/true);
  return std::move(sax.header);
}

}  // namespace fc::io
