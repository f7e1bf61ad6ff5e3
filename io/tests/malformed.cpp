#include "io/tests/malformed.hpp"

#include <cstring>

namespace fc::io::testing {

using nlohmann::json;

namespace {
int64_t elem_size(const std::string& dtype) {
  if (dtype == "F64") return 8;
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 1;
}
}  // namespace

std::string raw_file(uint64_t header_len, const std::string& rest) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((header_len >> (8 * i)) & 0xff);  // little-endian
  return out + rest;
}

std::string build_file(const std::vector<Spec>& specs, const json& metadata, const std::function<void(json&)>& tweak,
                       int64_t data_delta) {
  json header = json::object();
  int64_t offset = 0;
  for (const Spec& s : specs) {
    int64_t bytes = elem_size(s.dtype);
    for (int64_t d : s.shape) bytes *= d;
    header[s.name] = {{"dtype", s.dtype}, {"shape", s.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  if (tweak) tweak(header);
  const std::string h = header.dump();
  std::string data(size_t(offset + data_delta), '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(0x3c);  // fp16/bf16 bytes of modest finite values
  return raw_file(h.size(), h + data);
}

std::vector<Spec> good_specs(const std::string& dtype, bool with_d_o) {
  std::vector<Spec> s = {{"q", dtype, {1, 2, 3, 4}}, {"k", dtype, {1, 1, 5, 4}}, {"v", dtype, {1, 1, 5, 4}}};
  if (with_d_o) s.push_back({"d_o", dtype, {1, 2, 3, 4}});
  return s;
}

std::string good_file(bool with_d_o) {
  return build_file(good_specs("F16", with_d_o), {{"mask", "causal_bottom_right"}, {"scale", "0.25"}});
}

std::vector<BadCase> malformed_cases() {
  const json meta = {{"mask", "none"}};
  const std::vector<Spec> good = good_specs();
  auto with = [&](std::vector<Spec> s, size_t i, Spec replacement) {
    s[i] = std::move(replacement);
    return s;
  };
  auto set = [](const std::string& tensor, const std::string& field, json value) {
    return [=](json& h) { h[tensor][field] = value; };
  };
  auto raw = [](const std::string& header) { return raw_file(header.size(), header); };
  const std::string full = build_file(good, meta);
  std::vector<BadCase> c;
  c.push_back({"truncated_to_5_bytes", full.substr(0, 5), FileFault::Truncated, "truncated"});
  c.push_back({"empty_file", "", FileFault::Truncated, "truncated"});
  c.push_back({"truncated_in_header", full.substr(0, 40), FileFault::HeaderPastEnd, "past the end"});
  c.push_back({"truncated_in_data", full.substr(0, full.size() - 7), FileFault::BadOffsets, "past the end"});
  c.push_back({"header_length_past_end", raw_file(1000000, "{}"), FileFault::HeaderPastEnd, "past the end"});
  c.push_back({"header_length_huge", raw_file(uint64_t(1) << 63, "{}"), FileFault::HeaderPastEnd, "limit"});
  c.push_back({"header_not_json", raw("{not json"), FileFault::BadJson, "JSON"});
  c.push_back({"header_not_utf8", raw(std::string("{\"\xff\":1}")), FileFault::BadJson, "JSON"});
  c.push_back({"header_is_array", raw("[]"), FileFault::BadHeader, "object"});
  c.push_back({"header_deeply_nested", raw(std::string(100000, '[') + std::string(100000, ']')), FileFault::BadHeader,
               "object"});
  c.push_back({"entry_missing_shape", build_file(good, meta, [](json& h) { h["q"].erase("shape"); }),
               FileFault::BadHeader, "shape"});
  c.push_back({"offsets_past_end", build_file(good, meta, set("v", "data_offsets", {80, 100000})),
               FileFault::BadOffsets, "past the end"});
  c.push_back({"offsets_reversed", build_file(good, meta, set("v", "data_offsets", {120, 80})), FileFault::BadOffsets,
               "reversed"});
  c.push_back({"offsets_not_integers", build_file(good, meta, set("v", "data_offsets", {0.5, 8})), FileFault::BadHeader,
               "data_offsets"});
  c.push_back(
      {"offsets_overlap", build_file(good, meta, set("k", "data_offsets", {8, 48})), FileFault::BadOffsets, "overlap"});
  c.push_back({"unknown_dtype", build_file(with(good, 1, {"k", "I8", {1, 1, 5, 4}}), meta), FileFault::UnknownDtype,
               "unknown dtype"});
  c.push_back({"byte_size_mismatch", build_file(good, meta, set("q", "shape", {1, 2, 3, 5})), FileFault::SizeMismatch,
               "bytes"});
  c.push_back({"absurd_shape_2^40", build_file(good, meta, set("q", "shape", {1 << 20, 1 << 20, 1, 1})),
               FileFault::AbsurdShape, "shape"});
  c.push_back({"absurd_shape_overflow", build_file(good, meta, set("q", "shape", {1ll << 32, 1ll << 32, 1ll << 32, 1})),
               FileFault::AbsurdShape, "shape"});
  c.push_back({"negative_dimension", build_file(good, meta, set("q", "shape", {1, -2, 3, 4})), FileFault::BadHeader,
               "negative"});
  c.push_back({"metadata_not_string", build_file(good, {{"scale", 0.5}}), FileFault::BadHeader, "scale"});
  c.push_back({"missing_tensor_k", build_file({good[0], good[2]}, meta), FileFault::MissingTensor, "\"k\""});
  c.push_back({"wrong_rank_q", build_file(with(good, 0, {"q", "F16", {2, 3, 4}}), meta), FileFault::WrongRank, "rank"});
  c.push_back(
      {"mismatched_d", build_file(with(good, 0, {"q", "F16", {1, 2, 3, 8}}), meta), FileFault::BadShape, "head dim"});
  c.push_back({"mismatched_heads",
               build_file(with(with(good, 1, {"k", "F16", {1, 2, 5, 4}}), 2, {"v", "F16", {1, 2, 5, 4}}), meta,
                          set("q", "shape", {1, 3, 2, 4})),
               FileFault::BadShape, "heads"});
  c.push_back(
      {"mismatched_batch", build_file(with(good, 0, {"q", "F16", {2, 1, 3, 4}}), meta), FileFault::BadShape, "batch"});
  c.push_back({"v_shape_differs", build_file(with(good, 2, {"v", "F16", {1, 1, 4, 4}}), meta), FileFault::BadShape,
               "shape of k"});
  c.push_back({"d_o_shape_differs", build_file({good[0], good[1], good[2], {"d_o", "F16", {1, 2, 2, 4}}}, meta),
               FileFault::BadShape, "d_o"});
  c.push_back({"empty_dimension", build_file(with(good, 0, {"q", "F16", {1, 2, 0, 4}}), meta), FileFault::BadShape,
               "dimension"});
  c.push_back(
      {"mixed_dtypes", build_file(with(good, 1, {"k", "F32", {1, 1, 5, 4}}), meta), FileFault::MixedDtypes, "F32"});
  c.push_back({"unknown_mask", build_file(good, {{"mask", "causal"}}), FileFault::UnknownMask, "mask"});
  c.push_back({"scale_unparsable", build_file(good, {{"scale", "0.5x"}}), FileFault::BadScale, "scale"});
  c.push_back({"scale_empty", build_file(good, {{"scale", ""}}), FileFault::BadScale, "scale"});
  c.push_back({"scale_inf", build_file(good, {{"scale", "inf"}}), FileFault::BadScale, "scale"});
  c.push_back({"scale_nan", build_file(good, {{"scale", "nan"}}), FileFault::BadScale, "scale"});
  c.push_back({"scale_overflows", build_file(good, {{"scale", "1e999"}}), FileFault::BadScale, "scale"});
  // Strictness: decimal-only numbers, no duplicate keys at any level, no unknown tensor names, no
  // structure deeper or larger than a safetensors header has.
  for (const char* scale : {"+-1", "-+1", "0x10", "1e", ".", "++1", " 1", "1 ", "1_000", "infinity"})
    c.push_back({std::string("scale_not_decimal_") + scale, build_file(good, {{"scale", scale}}), FileFault::BadScale,
                 "scale"});
  // JSON objects cannot hold a key twice, so the duplicates are spliced into the encoded header text.
  auto dup = [&](const json& meta, const std::string& after, const std::string& insert) {
    const std::string bytes = build_file(good, meta);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
    std::string h = bytes.substr(8, n);
    h.insert(h.find(after) + after.size(), insert);
    return raw_file(h.size(), h + bytes.substr(8 + n));
  };
  c.push_back({"duplicate_tensor_q", dup(meta, "{", R"("q":{"dtype":"F16","shape":[0],"data_offsets":[0,0]},)"),
               FileFault::BadHeader, "duplicate key \"q\""});
  c.push_back({"duplicate_metadata_object", dup(meta, "{", R"("__metadata__":{"mask":"causal_top_left"},)"),
               FileFault::BadHeader, "duplicate key \"__metadata__\""});
  c.push_back({"duplicate_metadata_key", dup({{"scale", "0.5"}}, R"("__metadata__":{)", R"("scale":"2",)"),
               FileFault::BadHeader, "duplicate metadata key \"scale\""});
  c.push_back({"duplicate_entry_field", dup(meta, R"("k":{)", R"("dtype":"F32",)"), FileFault::BadHeader,
               "duplicate field \"dtype\""});
  c.push_back({"unknown_tensor_dO", build_file({good[0], good[1], good[2], {"dO", "F16", {1, 2, 3, 4}}}, meta),
               FileFault::UnknownTensor, "did you mean \"d_o\""});
  c.push_back({"unknown_tensor_bias", build_file({good[0], good[1], good[2], {"bias", "F16", {4}}}, meta),
               FileFault::UnknownTensor, "\"bias\""});
  c.push_back({"nested_objects", raw(R"({"q":{"dtype":{"dtype":{"dtype":"F16"}}}})"), FileFault::BadHeader, "dtype"});
  c.push_back(
      {"nested_metadata", raw(R"({"__metadata__":{"mask":{"mask":"none"}}})"), FileFault::BadHeader, "metadata"});
  c.push_back({"nested_shape", raw(R"({"q":{"shape":[[1]],"dtype":"F16","data_offsets":[0,2]}})"), FileFault::BadHeader,
               "shape"});
  c.push_back(
      {"rank_17", build_file(good, meta, set("q", "shape", std::vector<int>(17, 1))), FileFault::AbsurdShape, "rank"});
  c.push_back({"three_offsets", build_file(good, meta, set("v", "data_offsets", {80, 120, 120})), FileFault::BadHeader,
               "data_offsets"});
  return c;
}

}  // namespace fc::io::testing
