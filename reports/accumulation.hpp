// The accumulation audit (`flashcheck audit --accumulation`, docs/accumulation.md): the same
// inputs through cpu_tiled with fp16 vs fp32 accumulation, P rounded to storage or kept in fp32, FA1
// vs FA2 order, several tiles; P rounded to bf16 instead of fp16 (kernels/mutants' compact FA2
// emulation, with and without that rounding); the same-precision baseline (fp32 and fp16
// accumulation); and on a GPU the CUDA kernels (and any selected kernel or plugin): error and bias of
// o and lse vs N.
#pragma once

#include <string>
#include <vector>

#include "reports/plan.hpp"
#include "reports/subject.hpp"

namespace fc::report {

// The variants (names like cpu_tiled:acc=f16) and, when present, the GPU kernels; `--kernel` picks
// among variants and registry kernels by name (UsageError-free: unknown names throw
// std::invalid_argument, which the CLI reports as bad usage).
Selection accumulation_subjects(const std::vector<std::string>& kernels);

// Cases "acc/<dtype>/<regime>/n<N>": F16 and BF16 by default, N = 64 ... 16384 (65536 with a GPU),
// forward only, the last 256 query rows checked past N = 1024; regimes normal and positive_v.
std::vector<CaseSpec> accumulation_plan(const PlanOptions& o);
bool find_accumulation_case(const std::string& id, CaseSpec* out);

}  // namespace fc::report
