// libFuzzer: the regression-case reader on any bytes. It parses a case whose every field is in range
// (the poisoned index inside its tensor, configs and regime valid), or raises its typed FileError
// with a one-line message; a parsed small case then replays through its law on cpu_tiled without a
// crash (its verdict may be anything: the bytes are arbitrary).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernels/registry.hpp"
#include "properties/case.hpp"
#include "properties/laws.hpp"

namespace {

[[noreturn]] void bug(const char* what) {
  __builtin_printf("flashcheck fuzz_case: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  fc::props::Case c;
  std::string law_id;
  try {
    c = fc::props::case_from("fuzz", fc::io::parse_safetensors("fuzz", bytes), &law_id);
  } catch (const fc::io::FileError& e) {
    if (std::string(e.what()).find('\n') != std::string::npos) bug("a two-line message");
    return 0;
  }
  const fc::Problem& p = c.in.p;
  const int64_t n = c.poison_tensor == 0 ? fc::numel_q(p) : fc::numel_kv(p);
  if (c.poison_tensor < 0 || c.poison_tensor > 2 || c.poison_index < 0 || c.poison_index >= n)
    bug("accepted a poison position outside its tensor");
  if (c.cfg.block_m < 0 || c.cfg.block_n < 0 || c.cfg2.block_m < 0 || c.cfg2.block_n < 0) bug("negative tile");
  // Replay through the law the file names, as `check` does, when it is small enough to be quick.
  const fc::props::Law* law = fc::props::find_law(law_id);
  const fc::Kernel* k = fc::find_kernel("cpu_tiled");
  const double work = double(fc::numel_q(p)) * p.n_k;
  if (!law || !k || !fc::claims(*k, p) || work > 1e5) return 0;
  if (c.cfg.block_m > 4 * p.n_q + 64 || c.cfg.block_n > 4 * p.n_k + 64) return 0;  // huge tiles: slow, not wrong
  try {
    (void)law->check(*k, c);
  } catch (const std::exception&) {
    // A law may refuse a case it cannot use (e.g. a tile the kernel does not take): not a crash.
  }
  return 0;
}
