// Variant cases for the oracle tests (varlen with zero-length sequences, paged K/V with repeated and
// reversed pages, windows, softcap, ALiBi, d_v != d), and the tests' own reading of the layouts:
// each sequence cut out as a dense batch-1 problem by index arithmetic written here, not through
// attention.h's q_row / kv_row, so the oracles' addressing is checked against an independent one.
#pragma once

#include <string>
#include <vector>

#include "reference/oracle.hpp"

namespace fc::ref::testing {

struct VariantCase {
  std::string name;
  Problem p;
  Tensors64 in;  // d_o always present
};

// Values: q, k ~ qk_sigma N(0,1), v, d_o ~ N(0,1), on a grid of 1/64 (exact in every dtype); the
// variant data are the caller's (in.seq).
Tensors64 fill(const Problem& p, SeqData seq, double qk_sigma, uint64_t seed);

std::vector<VariantCase> variant_cases();

// Varlen from per-sequence lengths (cu_seqlens, totals, the longest lengths), and padded offsets
// over it: the sequences' first tokens at pad_q, pad_k (batch + 1 each, the last the packed total).
void set_varlen(Problem& p, SeqData& s, const std::vector<int32_t>& len_q, const std::vector<int32_t>& len_k);
void set_padded(Problem& p, SeqData& s, const std::vector<int32_t>& pad_q, const std::vector<int32_t>& pad_k);

// Sequence b of a varlen / paged problem as a dense batch-1 problem (lengths must be >= 1), or the
// same problem when it is dense (b = 0 only for batch 1). lse is then (1, heads_q, n_q).
struct Dense {
  Problem p;
  Tensors64 in;
};
Dense dense_sequence(const Problem& p, const Tensors64& in, int64_t b);

// The flat index in the variant layout of element (b, h, i, c) of o / d_q (width w), of key j's
// element c of d_k / d_v (width w), and of lse (b, h, i): the tests' own arithmetic.
int64_t q_index(const Problem& p, const SeqData& s, int64_t b, int64_t h, int64_t i, int64_t c, int64_t w);
int64_t kv_index(const Problem& p, const SeqData& s, int64_t b, int64_t h, int64_t j, int64_t c, int64_t w);
int64_t lse_at(const Problem& p, const SeqData& s, int64_t b, int64_t h, int64_t i);
int64_t n_q_of(const Problem& p, const SeqData& s, int64_t b);
int64_t n_k_of(const Problem& p, const SeqData& s, int64_t b);

}  // namespace fc::ref::testing
