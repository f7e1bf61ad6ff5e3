#include "io/safetensors.hpp"

#include "io/atomic_file.hpp"
#include "io/header.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

namespace fc::io {

static_assert(std::endian::native == std::endian::little, "tensor bytes are copied as little-endian");

namespace {

using nlohmann::json;

bool parse_storage_dtype(const std::string& s, DType* out) {
  for (const DTypeInfo& x : kDTypeTable)
    if (s == x.name) return *out = x.t, true;
  return false;
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// Validate one tensor's header entry (its JSON structure is already checked by parse_header) against
// a data buffer of `data_bytes` bytes.
Entry parse_entry(const std::string& file, const HeaderEntry& h, uint64_t data_bytes) {
  auto fail = [&](FileFault f, const std::string& what) {
    return FileError(f, file, fmt::format("tensor {}: {}", quoted(h.name), what));
  };
  Entry e{h.name, DType::F32, {}, h.begin, h.end};
  if (!parse_storage_dtype(h.dtype, &e.dtype))
    throw fail(FileFault::UnknownDtype,
               fmt::format("unknown dtype {} (expected {})", quoted(h.dtype), dtype_names([](DType) { return true; })));
  if (e.begin > e.end)
    throw fail(FileFault::BadOffsets, fmt::format("data_offsets [{}, {}] are reversed", e.begin, e.end));
  if (e.end > data_bytes)
    throw fail(FileFault::BadOffsets,
               fmt::format("data_offsets [{}, {}] run past the end of the data ({} bytes; truncated file?)", e.begin,
                           e.end, data_bytes));

  // Overflow-safe element count, capped by what the whole data buffer could hold: no multiplication
  // below can overflow because `numel` never exceeds `cap` (<= file size) before each step.
  const uint64_t elem = uint64_t(dtype_size(e.dtype));
  const uint64_t cap = data_bytes / elem;
  uint64_t numel = 1;
  bool too_big = false;
  for (const uint64_t n : h.shape) {
    if (n > uint64_t(INT64_MAX)) throw fail(FileFault::AbsurdShape, fmt::format("dimension {} is absurd", n));
    e.shape.push_back(int64_t(n));
    if (n == 0)
      numel = 0;
    else if (numel != 0 && !too_big) {
      if (numel > cap / n)
        too_big = true;  // numel * n > cap, tested without overflowing
      else
        numel *= n;
    }
  }
  if (too_big && numel != 0)
    throw fail(FileFault::AbsurdShape,
               fmt::format("shape {} of {} needs more bytes than the whole file's data ({} bytes)", shape_str(e.shape),
                           dtype_name(e.dtype), data_bytes));
  if (numel * elem != e.end - e.begin)
    throw fail(FileFault::SizeMismatch,
               fmt::format("shape {} of {} is {} bytes but data_offsets [{}, {}] span {}", shape_str(e.shape),
                           dtype_name(e.dtype), numel * elem, e.begin, e.end, e.end - e.begin));
  return e;
}

// The header's length n from the file's first 8 bytes (`first8`: those of them the file has), checked
// against the file's `size`.
uint64_t header_length(const std::string& name, std::string_view first8, uint64_t size) {
  if (size < 8)
    throw FileError(FileFault::Truncated, name,
                    fmt::format("truncated: {} bytes, shorter than the 8-byte header length", size));
  uint64_t n = 0;
  std::memcpy(&n, first8.data(), 8);  // little-endian u64 (static_assert above)
  if (n > kMaxHeaderBytes)
    throw FileError(
        FileFault::HeaderPastEnd, name,
        fmt::format("header length {} exceeds the {}-byte limit (file is {} bytes)", n, kMaxHeaderBytes, size));
  if (n > size - 8)
    throw FileError(FileFault::HeaderPastEnd, name,
                    fmt::format("header length {} runs past the end of the file ({} bytes)", n, size));
  return n;
}

// The header's tensors, each checked against a data buffer of `data_bytes` bytes, and none sharing a
// byte with another; out's metadata set. No tensor is allocated yet.
std::vector<Entry> parse_entries(const std::string& name, std::string_view header_json, uint64_t data_bytes,
                                 TensorFile& out) {
  Header header = parse_header(name, header_json);
  out.metadata = std::move(header.metadata);
  std::vector<Entry> entries;
  for (const HeaderEntry& h : header.entries) entries.push_back(parse_entry(name, h, data_bytes));
  // Tensors may not share bytes: sort by begin and compare neighbours.
  std::vector<const Entry*> by_begin;
  for (const Entry& e : entries)
    if (e.end > e.begin) by_begin.push_back(&e);
  std::sort(by_begin.begin(), by_begin.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_begin.size(); ++i)
    if (by_begin[i]->begin < by_begin[i - 1]->end)
      throw FileError(
          FileFault::BadOffsets, name,
          fmt::format("tensors {} and {} overlap", quoted(by_begin[i - 1]->name), quoted(by_begin[i]->name)));
  return entries;
}

HostTensor tensor_of(const Entry& e) {
  HostTensor t;  // shape from the header entry
  t.dtype = e.dtype;
  t.shape = e.shape;
  return t;
}

// read_safetensors (data: every tensor's bytes too) and read_safetensors_header (none).
TensorFile read_file(const std::string& path, bool data) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw FileError(FileFault::Io, path, "cannot open: no such file");
  if (!fs::is_regular_file(st)) throw FileError(FileFault::Io, path, "not a regular file");  // a FIFO would block
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw FileError(FileFault::Io, path, "cannot read its size");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw FileError(FileFault::Io, path, "cannot open for reading");
  // The header first, then each tensor's bytes straight into its own storage: on a training shape's file
  // (a gigabyte) a copy of the whole file in memory would cost as much again as the reading.
  // `read(at, len)`: the file's bytes [at, at + len), which the checks below keep inside `size`; a file
  // that shrank since is an error, as a short one would be.
  auto read = [&](uint64_t at, char* dst, uint64_t len) {
    f.seekg(std::streamoff(at));
    f.read(dst, std::streamsize(len));
    if (f.bad()) throw FileError(FileFault::Io, path, "read error");
    if (uint64_t(f.gcount()) != len)
      throw FileError(FileFault::Truncated, path,
                      fmt::format("truncated while reading: {} bytes expected at offset {}, {} read (the file "
                                  "shrank?)",
                                  len, at, f.gcount()));
  };
  char first8[8] = {};
  if (size >= 8) read(0, first8, 8);
  const uint64_t n = header_length(path, std::string_view(first8, 8), size);
  std::string header(size_t(n), '\0');  // at most kMaxHeaderBytes
  read(8, header.data(), n);
  TensorFile out;
  std::vector<Entry> entries = parse_entries(path, header, size - 8 - n, out);
  // In the file's order, so that the reads run forward through it.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (const Entry& e : entries) {
    HostTensor t = tensor_of(e);
    if (data) t.bytes.resize(size_t(e.end - e.begin));
    if (!t.bytes.empty()) read(8 + n + e.begin, reinterpret_cast<char*>(t.bytes.data()), e.end - e.begin);
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace

TensorFile parse_safetensors(const std::string& name, std::string_view bytes) {
  const uint64_t size = bytes.size();
  const uint64_t n = header_length(name, bytes.substr(0, 8), size);
  TensorFile out;
  const std::vector<Entry> entries = parse_entries(name, bytes.substr(8, n), size - 8 - n, out);
  // Only now, with every size proven to fit inside the file, allocate and copy.
  const std::string_view data = bytes.substr(8 + n);
  for (const Entry& e : entries) {
    HostTensor t = tensor_of(e);
    t.bytes.assign(data.begin() + e.begin, data.begin() + e.end);
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

TensorFile read_safetensors(const std::string& path) { return read_file(path, true); }

TensorFile read_safetensors_header(const std::string& path) { return read_file(path, false); }

std::string serialize_safetensors(const TensorFile& file) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    if (t.bytes.size() != size_t(t.numel()) * size_t(dtype_size(t.dtype)))
      throw std::invalid_argument(fmt::format("tensor {}: {} bytes do not match its shape", name, t.bytes.size()));
    header[name] = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data buffer 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  out += h;
  out.reserve(out.size() + offset);
  for (const auto& [name, t] : file.tensors) out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  return out;
}

void write_safetensors(const std::string& path, const TensorFile& file, const std::vector<std::string>& inputs) {
  write_file_atomic(path, serialize_safetensors(file), inputs);
}

}  // namespace fc::io
