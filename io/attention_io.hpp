// Attention tensor files (docs/INTERFACES.md): an input file holds q, k, v (+ d_o) and metadata "mask"
// (none|causal_top_left|causal_bottom_right, default none) and "scale" (decimal string, default
// 1/sqrt(d)); an output file holds o, lse (+ d_q, d_k, d_v) and metadata.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "kernels/tensor.hpp"

namespace fc::io {

// The tensor names of an input file (q k v d_o) and of an output file (o lse d_q d_k d_v).
const std::vector<std::string>& input_names();
const std::vector<std::string>& output_names();
// Refuses (Fault::UnknownTensor) any tensor of `file` not in `allowed`, suggesting the name it
// resembles: a misspelt "dO" must not silently drop the gradients. `role`: "an input", "an output".
void require_names(const std::string& name, const TensorFile& file, const std::vector<std::string>& allowed,
                   const char* role);

// Validate a parsed file as attention inputs and derive its Problem: q (batch, heads_q, n_q, d),
// k and v (batch, heads_kv, n_k, d), d_o shaped like q, one dtype, heads_q % heads_kv == 0, no other
// tensor, "scale" a plain decimal (io/numbers.hpp).
// `name` is used in error messages. Every problem is a FileError.
Inputs inputs_from(const std::string& name, TensorFile file);
Inputs read_inputs(const std::string& path);

// The inverse, for tests and tools: q k v (+ d_o) with metadata mask and scale ("%.17g").
TensorFile inputs_file(const Inputs& in);

// Outputs o, lse (+ d_q, d_k, d_v when present) with `metadata`.
TensorFile outputs_file(const Outputs& out, const std::map<std::string, std::string>& metadata);
// Atomic (io/atomic_file.hpp); `inputs`: files the output must not overwrite.
void write_outputs(const std::string& path, const Outputs& out, const std::map<std::string, std::string>& metadata,
                   const std::vector<std::string>& inputs = {});

// A decimal string for a double that reads back to the same value.
std::string exact_decimal(double x);

}  // namespace fc::io
