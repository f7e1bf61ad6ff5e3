// Device probes of what the error model assumes about the GPU (docs/error-model.md, section 7):
// ex2.approx.ftz.f32 and log2f over every float argument the kernels give them, and single mma.sync
// m16n8k16 instructions on chosen operands. Host launchers; device code in tc_probe.cu.
#pragma once

#include <cstdint>
#include <vector>

namespace fc::probe {

struct Ulps {
  double worst = 0;  // largest error in the model's units (2^-23 of the exact value, after the floor)
  float at = 0;      // the argument where it occurs
};
// ex2.approx.ftz.f32 over every float in [lo, hi] (one sign), against the fp64 exp2: results below
// 2^-126 may flush (floor 2^-126).
Ulps ex2_ulps(float lo, float hi);
// log2f over every float in [lo, hi] (>= 1), against the fp64 log2.
Ulps log2_ulps(float lo, float hi);
float ex2_at(float x);

// D = C + A B on mma.sync.m16n8k16.row.col.f32.{f16,bf16}: count instances, A (count, 16, 16)
// row-major, B (count, 16, 8) as [k][n], C and D (count, 16, 8); A and B already exact in the type.
void mma_batch(bool bf16, const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c,
               std::vector<float>& d, int count);

}  // namespace fc::probe
