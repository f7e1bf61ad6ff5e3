// The big campaign's tensor values: a grid magnitude·(g − 2048)/2048, g the 12 low bits of a seeded
// splitmix64 word per element (one stream per 2^20-element chunk, so threads fill chunks
// independently). The grid holds 4096 values, so the fast fill rounds each of them into the dtype
// once and copies bit patterns; per element it costs a splitmix64 step and a table load, which is
// what lets a case of 10^10 elements fill in seconds on the host (docs/fuzzing.md).
#pragma once

#include <cstdint>

#include "contract/tensor.hpp"

namespace fc::fuzz {

// Fills the compact tensor t on `threads` threads.
void fill_grid(HostTensor& t, uint64_t seed, double magnitude, int threads);

// The same values, one HostTensor::set per element (rounding each from double): the reference the
// fast fill is tested against, bit for bit.
void fill_grid_per_element(HostTensor& t, uint64_t seed, double magnitude, int threads);

}  // namespace fc::fuzz
