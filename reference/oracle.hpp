// The reference oracles' common types. Oracles see inputs as exact float64 values (every fp16, bf16
// and fp32 value is exact in fp64) in the contract's layouts (dense, varlen packed, paged; always
// compact), and share no code with kernels/ beyond attention.h.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention.h"

namespace fc::ref {

// The variants' per-sequence data (docs/SEMANTICS.md); empty where the problem does not use them.
struct SeqData {
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k;  // (batch + 1): varlen
  std::vector<int32_t> page_table;                  // (batch, pages_per_seq): paged
  std::vector<double> alibi_slopes;                 // (heads_q): ALiBi
  std::vector<double> sinks;                        // (heads_q): attention sinks (finite or -inf)
  std::vector<int32_t> cu_seqlens_q_padded, cu_seqlens_k_padded;  // (batch + 1): padded varlen
  Seqs seqs() const {
    auto at = [](const std::vector<int32_t>& x) { return x.empty() ? nullptr : x.data(); };
    Seqs s;
    s.cu_q = at(cu_seqlens_q), s.cu_k = at(cu_seqlens_k), s.page_table = at(page_table);
    s.pad_q = at(cu_seqlens_q_padded), s.pad_k = at(cu_seqlens_k_padded);
    return s;
  }
};

struct Tensors64 {
  std::vector<double> q;    // shape_q: (batch, heads_q, n_q, d); varlen (total_q, heads_q, d)
  std::vector<double> k;    // shape_kv: (batch, heads_kv, n_k, d); varlen (total_k, heads_kv, d); paged
                            // (num_pages, page_size, heads_kv, d)
  std::vector<double> v;    // shape_v: like k with d_v
  std::vector<double> d_o;  // shape_o: like q with d_v; empty: forward only (with no query at all,
                            // numel_o = 0, the gradients come back anyway: zeros)
  SeqData seq = {};         // the variants' data
};

struct Result64 {
  std::vector<double> o;    // shape_o
  std::vector<double> lse;  // shape_lse: (batch, heads_q, n_q); varlen (heads_q, total_q); natural log,
                            // -inf for empty rows
  std::vector<double> d_q;  // shape_q    } empty unless d_o was given; paged d_k, d_v hold, for each
  std::vector<double> d_k;  // shape_kv   } physical row, the sum over every logical key the page
  std::vector<double> d_v;  // shape_v    } table maps to it (0 for rows no sequence reads)
};

}  // namespace fc::ref
