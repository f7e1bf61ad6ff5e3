// Attention tensor files (DESIGN §3): an input file holds q, k, v (+ d_o) and metadata "mask"
// (none|causal_top_left|causal_bottom_right, default none) and "scale" (decimal string, default
// 1/sqrt(d)); an output file holds o, lse (+ d_q, d_k, d_v) and metadata.
#pragma once

#include <map>
#include <string>

#include "io/safetensors.hpp"
#include "kernels/tensor.hpp"

namespace fc::io {

// Validate a parsed file as attention inputs and derive its Problem: q (batch, heads_q, n_q, d),
// k and v (batch, heads_kv, n_k, d), d_o shaped like q, one dtype, heads_q % heads_kv == 0.
// `name` is used in error messages. Every problem is a FileError.
Inputs inputs_from(const std::string& name, TensorFile file);
Inputs read_inputs(const std::string& path);

// The inverse, for tests and tools: q k v (+ d_o) with metadata mask and scale ("%.17g").
TensorFile inputs_file(const Inputs& in);

// Outputs o, lse (+ d_q, d_k, d_v when present) with `metadata`.
TensorFile outputs_file(const Outputs& out, const std::map<std::string, std::string>& metadata);
void write_outputs(const std::string& path, const Outputs& out, const std::map<std::string, std::string>& metadata);

// A decimal string for a double that reads back to the same value.
std::string exact_decimal(double x);

}  // namespace fc::io
