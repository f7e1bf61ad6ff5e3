// Which certified oracle runs: the CPU's (reference/certified.hpp) or the GPU's
// (reference/gpu/certified_gpu.hpp), chosen once per process by `--oracle cpu|gpu|auto` (cli/) and
// applied here, in the one function the rest of flashcheck calls for a certificate. Both return the
// same certificate (docs/error-model.md): the choice never changes a verdict's soundness, only its cost.
#pragma once

#include <stdexcept>
#include <string>

#include "reference/bounds.hpp"
#include "reference/certified.hpp"

namespace fc::ref {

enum class OracleKind : int32_t {
  Auto = 0,  // the GPU when this build has it, a CUDA device is present, the problem is covered and fits
             // and is not small (below 2^24 multiply-adds of S the CPU takes milliseconds)
  Cpu = 1,
  Gpu = 2,   // the GPU or an error (OracleUnavailable) naming what is missing
};

// "auto", "cpu", "gpu" (exactly); false for anything else.
bool parse_oracle(const std::string& text, OracleKind* kind);
const char* oracle_name(OracleKind kind);

// The process-wide choice (default Auto). Set by the command line before any work starts.
void set_oracle(OracleKind kind);
OracleKind oracle();

// `--oracle gpu` on a problem the GPU oracle cannot take: the message names what is missing (a build
// without CUDA, no device, a variant it does not cover, the device's memory).
struct OracleUnavailable : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Whether (p, in) would run on the GPU under `kind`; why: empty, or the reason it would not (for
// kind == Gpu that is an OracleUnavailable's message). Problems the GPU finds out of its range only
// while running (scores past ~2^44) still say true here.
bool uses_gpu(OracleKind kind, const Problem& p, const Tensors64& in, std::string* why = nullptr);
// The same from the shape alone (grads: with the backward), before the inputs are read.
bool uses_gpu(OracleKind kind, const Problem& p, bool grads, std::string* why = nullptr);

// The certificate of (p, in) from the oracle `oracle()` selects: Auto falls back to the CPU whenever
// the GPU does not take the problem (also when it finds scores past its range while running, or meets
// a CUDA error: the CPU's certificate is as good); Gpu throws OracleUnavailable instead.
Certified certify(const Problem& p, const Tensors64& in);
Certified certify(OracleKind kind, const Problem& p, const Tensors64& in);

// The error model's bounds, error_bounds_max(p, in, ref, precs) (reference/bounds.hpp), computed where
// oracle() computes certificates: on the GPU (reference/gpu/bounds_gpu.hpp) when the GPU oracle would
// take the problem (uses_gpu), the GPU model covers every precision and, under Auto, the problem is
// not small; otherwise, and on any CUDA error, on the CPU. The two evaluate the same formulas, their
// sums in another order: bounds equal to a few ulps, each covered by its slack (docs/error-model.md).
// where (optional): "gpu" or "cpu", the side that ran.
Bounds bounds(const Problem& p, const Tensors64& in, const Certified& ref, const std::vector<Precision>& precs,
              std::string* where = nullptr);

// Whether bounds() would run on the GPU for a problem of p's shape (grads: with the backward) under
// `kind` and these precisions, from the shape alone (the inputs' finiteness aside); why: the reason not.
bool bounds_on_gpu(OracleKind kind, const Problem& p, bool grads, const std::vector<Precision>& precs,
                   std::string* why = nullptr);

// Whether this build carries the GPU oracle (FLASHCHECK_HAVE_CUDA).
bool gpu_oracle_built();

}  // namespace fc::ref
