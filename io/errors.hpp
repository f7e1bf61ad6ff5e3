// The one error type of tensor-file I/O. Every malformed or unusable file raises a FileError whose
// what() is exactly one line naming the file and the problem; `fault` says which problem it was, so
// tests and callers can tell them apart without parsing the message.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fc::io {

enum class FileFault {
  Io,             // cannot open / read / write the file, or not a regular file
  Truncated,      // shorter than the 8-byte header length
  HeaderPastEnd,  // header length runs past the end of the file (or over the header size limit)
  BadJson,        // header is not JSON
  BadHeader,      // JSON, but not a safetensors header (wrong types, missing or duplicate fields, nesting)
  BadOffsets,     // data_offsets reversed or past the end of the data buffer
  UnknownDtype,   // dtype other than F16 BF16 F32 F64 I32
  AbsurdShape,    // shape product overflows or exceeds what the file can hold
  SizeMismatch,   // byte size != shape x dtype size
  MissingTensor,  // q, k or v absent
  UnknownTensor,  // a tensor name the file's role does not define (a misspelt "dO" would be dropped)
  WrongRank,      // an attention tensor is not rank 4
  BadShape,       // q/k/v/d_o disagree (batch, heads, d, n), GQA divisibility, empty or huge dims
  MixedDtypes,    // q, k, v, d_o not all one dtype
  UnknownMask,    // metadata "mask" not none|causal_top_left|causal_bottom_right
  BadScale,       // metadata "scale" not a finite decimal number
  OutOfRange,     // values a consumer cannot take (e.g. |x| >= 2^500 for the certified oracle)
  BadMetadata,    // a metadata value that does not parse or is out of range (e.g. a regression case's fields)
  TooLarge,       // a well-formed problem whose oracle run would exceed the memory or time limit
  BadVariant,     // variant data that disagree (cu_seqlens, page_table, alibi_slopes, sinks; their shapes and values)
};

const char* fault_name(FileFault f);

// A name or value as it appears in a message: JSON-quoted and escaped, so it stays on one line.
std::string quoted(const std::string& s);
// A shape as a message shows it: [2, 16, 64].
std::string shape_str(const std::vector<int64_t>& shape);

class FileError : public std::runtime_error {
 public:
  FileError(FileFault fault, const std::string& file, const std::string& problem);
  FileFault fault;
  std::string file;     // as given by the caller
  std::string problem;  // the message without the file name
};

}  // namespace fc::io
