// safetensors read/write (docs/interfaces.md). Layout: 8-byte little-endian header length N, N bytes of JSON
// header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then
// the data buffer (offsets are relative to its start). Dtypes F16 BF16 F32 F64 (I32 for offsets and page tables).
//
// Reading validates everything before allocating a tensor: sizes are checked against the bytes the
// file actually holds with overflow-safe arithmetic, so a hostile header cannot make us allocate
// 2^40 elements, read out of bounds, crash or hang. Every problem is a FileError (io/errors.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/errors.hpp"
#include "contract/tensor.hpp"

namespace fc::io {

struct TensorFile {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// The header may be at most this many bytes (a real header is a few hundred).
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

// Parse a whole file held in memory; `name` is used in error messages only.
TensorFile parse_safetensors(const std::string& name, std::string_view bytes);
// Read and parse `path` (a regular file; FIFOs and directories are refused, never opened): the header
// first, then each tensor's bytes straight into its own storage, with parse_safetensors' checks and
// errors (a file that shrinks while it is read is Truncated).
TensorFile read_safetensors(const std::string& path);
// The same file's header alone, with the same checks: every tensor's dtype and shape, its bytes left
// empty (for checks of names, dtypes and shapes before the bytes are needed).
TensorFile read_safetensors_header(const std::string& path);

// Encode: header padded with spaces to a multiple of 8 bytes, tensors in name order, packed.
std::string serialize_safetensors(const TensorFile& file);
// Write atomically (io/atomic_file.hpp): a reader sees the previous file or the whole new one, never
// part of it; a target that is one of `inputs`, or not a regular file, is refused. Failures are
// FileError(FileFault::Io).
void write_safetensors(const std::string& path, const TensorFile& file, const std::vector<std::string>& inputs = {});

}  // namespace fc::io
