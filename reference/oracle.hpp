// The reference oracles' common types. Oracles see inputs as exact float64 values (every fp16, bf16
// and fp32 value is exact in fp64) in the contract's layouts (dense, varlen packed, paged; always
// compact), and share no code with kernels/ beyond attention.h.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "contract/attention.h"

namespace fc::ref {

// The variants' per-sequence data (docs/SEMANTICS.md); empty where the problem does not use them.
struct SeqData {
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k;  // (batch + 1): varlen
  std::vector<int32_t> page_table;                  // (batch, pages_per_seq): paged
  std::vector<double> alibi_slopes;                 // (heads_q): ALiBi
  std::vector<double> sinks;                        // (heads_q): attention sinks (finite or -inf)
  std::vector<int32_t> cu_seqlens_q_padded, cu_seqlens_k_padded;  // (batch + 1): padded varlen
  // Contract v3, dense problems: the mask tensor (boolean as 0/1, additive as its values) and the
  // block mask (0/1), each (B_m, H_m, rows, cols) with its shape; empty when the problem has none.
  std::vector<double> mask, block_mask;
  std::vector<int64_t> mask_shape, block_mask_shape;
  // The masks' effect on key j of query i in (b, h), read from the definitions (docs/SEMANTICS.md,
  // "Mask tensors"): -inf where a boolean bit or a block bit is false or the additive value is -inf,
  // else the additive value (0 without one). The built-in mask and window are visibility.hpp's.
  double bias(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) const {
    const double hidden = -std::numeric_limits<double>::infinity();
    auto at = [&](const std::vector<double>& t, const std::vector<int64_t>& s, int64_t r, int64_t c) {
      const int64_t bm = s[0] > 1 ? b : 0, hm = s[1] > 1 ? h : 0;
      return t[size_t(((bm * s[1] + hm) * s[2] + r) * s[3] + c)];
    };
    if (!block_mask.empty() && at(block_mask, block_mask_shape, i / p.block_q, j / p.block_k) == 0) return hidden;
    if (mask.empty()) return 0.0;
    const double x = at(mask, mask_shape, i, j);
    if (p.mask_kind == MaskKind::Bool) return x != 0 ? 0.0 : hidden;
    return x;
  }
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
