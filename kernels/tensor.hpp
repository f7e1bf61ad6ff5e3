// Host tensors: raw little-endian bytes in one of the contract's dtypes, plus a shape. The common
// currency between tensor files, kernels, references and reports. Host only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention.h"

namespace fc {

struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // numel() * dtype_size(dtype)

  HostTensor() = default;
  HostTensor(DType t, std::vector<int64_t> s);  // zero-filled

  int64_t numel() const;
  double get(int64_t i) const;    // exact widening to double
  void set(int64_t i, double x);  // round-to-nearest-even into dtype
  std::vector<double> to_f64() const;
  static HostTensor from_f64(DType t, std::vector<int64_t> s, const std::vector<double>& x);
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(bytes.data());
  }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
};

// Round x to the nearest value of dtype t (ties to even), returned as double.
double round_to(DType t, double x);

// Canonical shapes of the contract's tensors for a problem.
std::vector<int64_t> shape_q(const Problem& p);    // (batch, heads_q, n_q, d)
std::vector<int64_t> shape_kv(const Problem& p);   // (batch, heads_kv, n_k, d)
std::vector<int64_t> shape_lse(const Problem& p);  // (batch, heads_q, n_q)

// lse is F32 by the contract; F64-storage runs (a CPU-only oracle-grade mode) keep it in F64 so that
// a backward recomputing P from lse stays at fp64 accuracy.
inline DType lse_dtype(DType storage) { return storage == DType::F64 ? DType::F64 : DType::F32; }

// A problem's inputs: q, k, v in p.dtype; d_o optional (empty shape = absent).
struct Inputs {
  Problem p;
  HostTensor q, k, v, d_o;
  bool has_d_o() const { return !d_o.shape.empty(); }
};

// What a kernel returns: o (and d_q, d_k, d_v) in p.dtype, lse in lse_dtype(p.dtype).
struct Outputs {
  HostTensor o, lse, d_q, d_k, d_v;
  bool has_grads() const { return !d_q.shape.empty(); }
};

}  // namespace fc
