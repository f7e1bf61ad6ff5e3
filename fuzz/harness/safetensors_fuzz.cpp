// libFuzzer: the tensor-file reader on any bytes. Either it parses, and then the file is a valid
// attention input or a typed FileError says why not, and the parsed tensors survive a write/read
// round trip unchanged; or the reader raises its typed FileError with a one-line message. Anything
// else — another exception, a crash, a leak, a sanitizer finding, a hang — is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "io/attention_io.hpp"
#include "io/safetensors.hpp"

namespace {

[[noreturn]] void bug(const char* what) {
  __builtin_printf("flashcheck fuzz_safetensors: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  fc::io::TensorFile file;
  try {
    file = fc::io::parse_safetensors("fuzz", bytes);
  } catch (const fc::io::FileError& e) {
    if (std::string(e.what()).find('\n') != std::string::npos) bug("a two-line message");
    return 0;
  }
  // Accepted: it must round-trip exactly through the writer.
  const fc::io::TensorFile again = fc::io::parse_safetensors("again", fc::io::serialize_safetensors(file));
  if (again.metadata != file.metadata || again.tensors.size() != file.tensors.size())
    bug("round trip changed the file");
  for (const auto& [name, t] : file.tensors) {
    const fc::HostTensor& u = again.tensors.at(name);
    if (u.dtype != t.dtype || u.shape != t.shape || u.bytes != t.bytes) bug("round trip changed a tensor");
  }
  try {
    const fc::Inputs in = fc::io::inputs_from("fuzz", std::move(file));
    if (!fc::well_formed(in.p)) bug("accepted an ill-formed problem");
    // Per-tensor dtypes: each tensor in its own (q's is the problem's dtype, k's may differ).
    if (in.q.bytes.size() != size_t(fc::numel_q(in.p)) * size_t(fc::dtype_size(fc::dtype_q(in.p)))) bug("q's size");
    if (in.k.bytes.size() != size_t(fc::numel_kv(in.p)) * size_t(fc::dtype_size(fc::dtype_kv(in.p)))) bug("k's size");
  } catch (const fc::io::FileError& e) {
    if (std::string(e.what()).find('\n') != std::string::npos) bug("a two-line message");
  }
  return 0;
}
