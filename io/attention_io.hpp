// Attention tensor files (docs/interfaces.md): an input file holds q, k, v (+ d_o) and metadata "mask"
// (none|causal_top_left|causal_bottom_right, default none) and "scale" (decimal string, default
// 1/sqrt(d)); an output file holds o, lse (+ d_q, d_k, d_v) and metadata.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "contract/tensor.hpp"

namespace fc::io {

// The tensor names of an input file (q k v d_o) and of an output file (o lse d_q d_k d_v).
const std::vector<std::string>& input_names();
const std::vector<std::string>& output_names();
// Refuses (FileFault::UnknownTensor) any tensor of `file` not in `allowed`, suggesting the name it
// resembles: a misspelt "dO" must not silently drop the gradients. `role`: "an input", "an output".
void require_names(const std::string& name, const TensorFile& file, const std::vector<std::string>& allowed,
                   const char* role);

// Validate a parsed file as attention inputs and derive its Problem (docs/SEMANTICS.md):
// dense q (batch, heads_q, n_q, d), k (batch, heads_kv, n_k, d), v (..., d_v), d_o shaped like o;
// varlen (cu_seqlens_q, cu_seqlens_k I32 (batch + 1)) q (total_q, heads_q, d), k, v (total_k,
// heads_kv, d | d_v); paged (page_table I32 (batch, pages per sequence)) k, v (num_pages, page_size,
// heads_kv, d | d_v); padded varlen (cu_seqlens_q_padded, cu_seqlens_k_padded I32 (batch + 1): each
// sequence's first token, the packed tensors holding padding between); alibi_slopes F32 (heads_q);
// sinks F32 (heads_q, finite or -inf). Floating dtypes:
// q's, k's (= v's) and o's (= d_o's) may differ (Problem::dtype, dtype_kv, dtype_o); heads_q % heads_kv
// == 0, no other tensor. Metadata: "mask", "scale" (a plain decimal, io/numbers.hpp), "window_left" and
// "window_right" (integers >= -1, default -1), "softcap" (decimal >= 0, default 0), "dtype_o" (o's
// dtype, default q's).
// `name` is used in error messages. Every problem is a FileError.
Inputs inputs_from(const std::string& name, TensorFile file);
Inputs read_inputs(const std::string& path);

// The inverse, for tests and tools: every tensor of in (compacted) with problem_metadata.
TensorFile inputs_file(const Inputs& in);
// A problem's metadata as a file carries it: mask, scale, and window_left / window_right / softcap /
// dtype_o when they are set (dtype_o when o's dtype is not q's).
std::map<std::string, std::string> problem_metadata(const Problem& p);
// The varlen and paged part of inputs_from (variant_io.cpp): the offsets' and the page table's
// shapes, and p's batch, lengths, totals and paging from them.
void read_varlen(const TensorFile& file, const std::function<FileError(FileFault, const std::string&)>& fail,
                 bool paged, Problem& p);

// Outputs o, lse (+ d_q, d_k, d_v when present) with `metadata`.
TensorFile outputs_file(const Outputs& out, const std::map<std::string, std::string>& metadata);
// Atomic (io/atomic_file.hpp); `inputs`: files the output must not overwrite.
void write_outputs(const std::string& path, const Outputs& out, const std::map<std::string, std::string>& metadata,
                   const std::vector<std::string>& inputs = {});

// A decimal string for a double that reads back to the same value.
std::string exact_decimal(double x);

}  // namespace fc::io
