// flashcheck contract (docs/SEMANTICS.md). Included by every kernel, reference and property; usable from
// host C++ and CUDA device code alike. Nothing here knows about Eigen, Boost or any storage type.
#pragma once

#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define FC_HD __host__ __device__
#else
#define FC_HD
#endif

namespace fc {

// Storage dtypes. F64 exists on the CPU only (references, cpu_tiled with fp64 storage).
enum class DType : int32_t { F32 = 0, F16 = 1, BF16 = 2, F64 = 3 };

// Masks. top-left: key j visible to query i iff j <= i (PyTorch SDPA is_causal).
// bottom-right: j <= i + n_k - n_q (FlashAttention >= 2.1): the last query sees every key.
enum class Mask : int32_t { None = 0, CausalTopLeft = 1, CausalBottomRight = 2 };

// One attention problem. q, o, d_o, d_q: (batch, heads_q, n_q, d); k, v, d_k, d_v:
// (batch, heads_kv, n_k, d); lse: (batch, heads_q, n_q), float32 natural-log. Contiguous row-major.
struct Problem {
  int32_t batch = 1;
  int32_t heads_q = 1;
  int32_t heads_kv = 1;  // heads_q % heads_kv == 0 (MQA/GQA)
  int32_t n_q = 1;
  int32_t n_k = 1;
  int32_t d = 1;
  DType dtype = DType::F32;
  Mask mask = Mask::None;
  double scale = 1.0;  // s_ij = scale * q_i . k_j; callers default it with default_scale(d)
};

// Query head h reads kv head h / (heads_q / heads_kv).
FC_HD inline int32_t kv_head(const Problem& p, int32_t h) { return h / (p.heads_q / p.heads_kv); }

// Is key j visible to query i?  The one definition of the three masks.
FC_HD inline bool visible(Mask mask, int64_t i, int64_t j, int64_t n_q, int64_t n_k) {
  switch (mask) {
    case Mask::None: return true;
    case Mask::CausalTopLeft: return j <= i;
    case Mask::CausalBottomRight: return j <= i + n_k - n_q;
  }
  return false;
}

// Number of keys visible to query i: visible keys always form the prefix [0, n_visible).
FC_HD inline int64_t n_visible(Mask mask, int64_t i, int64_t n_q, int64_t n_k) {
  int64_t last = n_k - 1;  // last visible key index
  if (mask == Mask::CausalTopLeft) last = i;
  if (mask == Mask::CausalBottomRight) last = i + n_k - n_q;
  if (last >= n_k) last = n_k - 1;
  return last < 0 ? 0 : last + 1;
}

// Element counts and flat offsets of the contract's tensors.
inline int64_t numel_q(const Problem& p) { return int64_t(p.batch) * p.heads_q * p.n_q * p.d; }
inline int64_t numel_kv(const Problem& p) { return int64_t(p.batch) * p.heads_kv * p.n_k * p.d; }
inline int64_t numel_lse(const Problem& p) { return int64_t(p.batch) * p.heads_q * p.n_q; }
FC_HD inline int64_t offset_q(const Problem& p, int64_t b, int64_t h, int64_t i) {
  return ((b * p.heads_q + h) * p.n_q + i) * p.d;  // row i of q/o/d_o/d_q
}
FC_HD inline int64_t offset_kv(const Problem& p, int64_t b, int64_t h_kv, int64_t j) {
  return ((b * p.heads_kv + h_kv) * p.n_k + j) * p.d;  // row j of k/v/d_k/d_v
}
FC_HD inline int64_t offset_lse(const Problem& p, int64_t b, int64_t h, int64_t i) {
  return (b * p.heads_q + h) * p.n_q + i;
}

// Is the problem well-formed? (Positive sizes, GQA divisibility, finite positive scale is NOT
// required: scale may be any finite value, including negative.)
inline bool well_formed(const Problem& p) {
  return p.batch > 0 && p.heads_q > 0 && p.heads_kv > 0 && p.n_q > 0 && p.n_k > 0 && p.d > 0 &&
         p.heads_q % p.heads_kv == 0 && p.scale == p.scale && p.scale != std::numeric_limits<double>::infinity() &&
         p.scale != -std::numeric_limits<double>::infinity();
}

// Default scale 1/sqrt(d).
double default_scale(int32_t d);

const char* dtype_name(DType t);  // "F16" "BF16" "F32" "F64" (safetensors spelling)
const char* mask_name(Mask m);    // "none" "causal_top_left" "causal_bottom_right"
bool parse_dtype(const char* s, DType* out);
bool parse_mask(const char* s, Mask* out);
int dtype_size(DType t);     // bytes per element
double max_finite(DType t);  // largest finite value of the dtype

}  // namespace fc
