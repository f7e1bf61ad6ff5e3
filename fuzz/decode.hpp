// The structured decoder shared by the libFuzzer kernel harness and the `flashcheck fuzz` campaign:
// bytes -> an attention case a kernel claims. Every byte string decodes to some case, and every
// shape, mask, tile, scale and value regime the kernel claims is reachable, down to raw bit
// patterns: NaN, +-inf, -0, subnormals and the fp16/bf16/fp32/fp64 limits are all values the
// decoder can produce. The case's regime label is what its data show (properties' classify), so a
// law is only ever held to cases of the regimes it claims.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/bytes.hpp"
#include "kernels/registry.hpp"
#include "properties/case.hpp"

namespace fc::fuzz {

struct ShapeLimits {
  int32_t max_batch = 2, max_heads_kv = 2, max_group = 3;
  int32_t max_n = 40;    // n_q, n_k
  int32_t max_d = 16;    // when the kernel takes any d (fixed head dims are the kernel's)
  bool backward = true;  // decode d_o when the kernel has a backward
};

// How a tensor's values are drawn (one byte per tensor chooses).
enum class Values : int {
  Zero,      // all zeros
  SmallInt,  // integers in [-4, 4]: every transform exact
  Grid,      // k / 2^s, |k| < 2^15: a coarse grid at a chosen scale
  Scaled,    // +-(1 + f) 2^e, e around one exponent anywhere in the dtype's range (near max, subnormal)
  Raw,       // every element's raw bit pattern: anything the dtype can hold
  Sprinkle,  // small integers with a few specials: NaN, +-inf, +-max, +-min normal, +-min subnormal, -0
  Constant,  // one value everywhere: all scores of a row equal
  kCount
};

// Decodes a case for kernel k (its dtypes, masks, head dims, tiles, backward). The second tile
// config (block-size law) is decoded too, and aux for the permutation laws.
props::Case decode_case(ByteSource& src, const Kernel& k, const ShapeLimits& limits = {});

// The two halves of decode_case, for cases that share a shape (the campaign packs them): the
// problem, configs, aux and whether d_o is present (as a zero-filled tensor), then the values.
// `modes`: the value modes to choose among (empty: all).
props::Case decode_shape(ByteSource& src, const Kernel& k, const ShapeLimits& limits);
void decode_values(ByteSource& src, props::Case& c, const std::vector<Values>& modes = {});
const char* values_name(Values v);
bool parse_values(const std::string& s, Values* out);

}  // namespace fc::fuzz
