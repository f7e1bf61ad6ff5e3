// The long-row regime: rows of thousands of keys (few queries, small d) whose values make the
// accumulation chain of o, l and the gradients err as much as it can, so that a bound charging a
// shorter chain than the kernel's fails (docs/error-model.md, "Accumulation chains"). The
// patterns, each with every score equal (q = k = 0) unless said otherwise:
//   run_of_x    v = [2^e, x, x, ...], x just over half an accumulator ulp of 2^e: in key order each
//               round-to-nearest add of x rounds the same way;
//   alternating v = +-1: o cancels to ~0 while every partial sum stays O(1);
//   one_large   one score 20 above the rest (first, middle or last key): a weight near 1 among
//               thousands near e^-20, v random;
//   tiny_run    v = [2^e, t, t, ...], t just under a tensor core's alignment grid (2^-25 of 2^e):
//               a fused step drops every one of them;
//   random      q, k, v, d_o ~ N(0, 1): an ordinary long row.
#pragma once

#include <cstdint>

#include "properties/case.hpp"

namespace fc::props {

enum class LongPattern : int32_t { RunOfX, Alternating, OneLarge, TinyRun, Random, kCount };
const char* long_pattern_name(LongPattern p);

// Fills c.in's q, k, v (and d_o when `backward`) for the problem already in c.in.p.
void fill_long_row(Case& c, LongPattern pattern, uint64_t seed, bool backward);

}  // namespace fc::props
