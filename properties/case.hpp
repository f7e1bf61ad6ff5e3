// One generated test case: a problem, its inputs (exactly representable in the storage dtype), the
// tile config to run and the value regime it was drawn from, plus the few law-specific choices
// (a poisoned position, a permutation seed). Cases print compactly (RapidCheck's counterexample)
// and round-trip through regression files.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "kernels/registry.hpp"

namespace fc::props {

enum class Regime : int32_t {
  Normal,       // N(0,1) on a grid that shrinks toward small integers
  Outliers,     // FA3 paper: N(0,1) + N(0,100) * Bernoulli(0.001), at least one outlier
  Huge,         // scores to FLT_MAX/4 (fp64 storage: 1e8; max_score_for says why)
  FarBelow,     // every score far below -1e4
  Fp16Max,      // v (and some q, k) near +-65504
  Ties,         // keys drawn from two distinct rows: many exactly tied scores
  AllEqual,     // every key identical: every score of a row equal
  SubnormalP,   // score gaps that put exp(s - m) in the subnormal range of the storage type
  Poison,       // one NaN or +-inf at a chosen position
  FullyMasked,  // bottom-right causal mask with n_q > n_k: rows that see no key
  Grid,         // coarse-grid values so that metamorphic transforms stay exact in storage
  Subnormal,    // inputs in the storage type's subnormal range (outputs there too)
  Ones,         // V = 1: every output is 1 (rows sum to one), 0 on a row with no visible key
  LongRow,      // thousands of keys per row, values that make the accumulation chain err (long_rows.hpp)
  kCount
};
const char* regime_name(Regime r);
bool parse_regime(const std::string& s, Regime* out);

struct Case {
  Inputs in;    // q k v (+ d_o) in in.p.dtype
  Config cfg;   // tile config the kernel runs with (block-size law: the first of two)
  Config cfg2;  // the second config of the block-size law
  Regime regime = Regime::Normal;
  int32_t poison_tensor = 0;  // Poison: 0 q, 1 k, 2 v
  int64_t poison_index = 0;   // flat index into that tensor
  double poison_value = 0;    // NaN, +inf or -inf
  uint64_t aux = 0;           // law-specific randomness (permutations, shifts), from the case seed
};

// Whether a and b are the same case: every field, and the bits of every tensor.
bool same_case(const Case& a, const Case& b);

// Multi-line description: shape, dtype, mask, scale, configs, regime, and the values when small.
std::string describe(const Case& c);
// The same for a problem's inputs alone (a variant problem a law drew from a case): its shape, its
// variants (window, softcap, varlen offsets, page table, ALiBi slopes, strided tensors) and values.
std::string describe(const Inputs& in);
void showValue(const Case& c, std::ostream& os);  // RapidCheck's counterexample printer (ADL)

// Regression files: safetensors inputs (q k v d_o, metadata mask and scale) plus metadata for the
// rest of the case and the law that once failed on it. write_case returns the path it wrote.
// read_case: any safetensors input file; the fc.* keys it lacks keep Case's defaults (metadata, when
// given, receives the file's metadata so callers can tell). A malformed fc.* value is a FileError.
// write_case's `extra`: more metadata (e.g. a fuzz campaign's seed); `name`: the file name (default: law-HASH).
std::string write_case(const std::string& dir, const std::string& law, const std::string& kernel, const Case& c,
                       const std::map<std::string, std::string>& extra = {}, const std::string& name = "");
Case read_case(const std::string& path, std::string* law, std::map<std::string, std::string>* metadata = nullptr);
// The same from a parsed file (`path` names it in messages): every field validated, FileError otherwise.
Case case_from(const std::string& path, io::TensorFile file, std::string* law);

}  // namespace fc::props
