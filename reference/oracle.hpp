// The reference oracles' common types. Oracles see inputs as exact float64 values (every fp16, bf16
// and fp32 value is exact in fp64) in the contract's layouts, and share no code with kernels/ beyond
// attention.h.
#pragma once

#include <vector>

#include "kernels/attention.h"

namespace fc::ref {

struct Tensors64 {
  std::vector<double> q;    // (batch, heads_q, n_q, d)
  std::vector<double> k;    // (batch, heads_kv, n_k, d)
  std::vector<double> v;    // (batch, heads_kv, n_k, d)
  std::vector<double> d_o;  // (batch, heads_q, n_q, d); empty: forward only
};

struct Result64 {
  std::vector<double> o;    // (batch, heads_q, n_q, d)
  std::vector<double> lse;  // (batch, heads_q, n_q), natural log; -inf for empty rows
  std::vector<double> d_q;  // (batch, heads_q, n_q, d)   } empty unless d_o was given
  std::vector<double> d_k;  // (batch, heads_kv, n_k, d)  }
  std::vector<double> d_v;  // (batch, heads_kv, n_k, d)  }
};

}  // namespace fc::ref
