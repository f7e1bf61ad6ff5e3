// Reading and writing one row of a contract tensor (internal to kernels/cpu), whatever its layout:
// the row index comes from q_row / kv_row (attention.h: dense, varlen or paged), and a strided
// tensor is read through its strides. The kernels gather each (sequence, head) into compact
// buffers once and compute on those, so the layout costs one pass over the inputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/scalar.hpp"
#include "contract/tensor.hpp"

namespace fc::cpu {

// out[c] = t's row `row` (width w), element c, converted to A.
template <class A, class T>
void read_row(const HostTensor& t, int64_t row, int64_t w, A* out) {
  if (t.is_compact()) {
    const T* x = t.data<T>() + row * w;  // (w)
    for (int64_t c = 0; c < w; ++c) out[c] = cvt<A>(x[c]);
    return;
  }
  const T* s = t.storage<T>();
  const int64_t at = t.storage_index(row * w), step = t.strides.back();
  for (int64_t c = 0; c < w; ++c) out[c] = cvt<A>(s[at + c * step]);
}

// t's row `row` (width w) = x (already in the storage type T).
template <class T>
void write_row(HostTensor& t, int64_t row, int64_t w, const T* x) {
  if (t.is_compact()) {
    T* y = t.data<T>() + row * w;  // (w)
    for (int64_t c = 0; c < w; ++c) y[c] = x[c];
    return;
  }
  T* s = t.storage<T>();
  const int64_t at = t.storage_index(row * w), step = t.strides.back();
  for (int64_t c = 0; c < w; ++c) s[at + c * step] = x[c];
}

// Where a finished d_k / d_v row goes. Dense and varlen: every key row belongs to one sequence and
// is written once. Paged: a page table may map several logical keys to one physical row (repeated
// pages), whose gradient is their sum: rows are summed in the softmax type L and rounded at the end
// (adding to an exact 0 first, so a table without repeats gives the contiguous run's bits).
template <class T, class L>
struct KvGrads {
  HostTensor& d_k;
  HostTensor& d_v;
  int64_t d, d_v_dim;
  bool paged;
  std::vector<L> sum_k, sum_v;  // paged: (rows_kv, d), (rows_kv, d_v)

  KvGrads(const Problem& p, HostTensor& dk, HostTensor& dv)
      : d_k(dk), d_v(dv), d(p.d), d_v_dim(head_dim_v(p)), paged(p.page_size > 0) {
    if (paged) sum_k.assign(size_t(rows_kv(p) * d), L(0)), sum_v.assign(size_t(rows_kv(p) * d_v_dim), L(0));
  }
  void put(int64_t row, const L* dk, const L* dv) {
    if (paged) {
      for (int64_t c = 0; c < d; ++c) sum_k[size_t(row * d + c)] += dk[c];
      for (int64_t c = 0; c < d_v_dim; ++c) sum_v[size_t(row * d_v_dim + c)] += dv[c];
      return;
    }
    std::vector<T> x(size_t(std::max(d, d_v_dim)));  // (max(d, d_v)) one row in storage
    for (int64_t c = 0; c < d; ++c) x[size_t(c)] = cvt<T>(dk[c]);
    write_row<T>(d_k, row, d, x.data());
    for (int64_t c = 0; c < d_v_dim; ++c) x[size_t(c)] = cvt<T>(dv[c]);
    write_row<T>(d_v, row, d_v_dim, x.data());
  }
  // Paged: every physical row, summed; rows no sequence reads get 0.
  void finish() {
    if (!paged) return;
    const int64_t rows = int64_t(sum_k.size()) / d;
    std::vector<T> x(size_t(std::max(d, d_v_dim)));  // (max(d, d_v))
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < d; ++c) x[size_t(c)] = cvt<T>(sum_k[size_t(r * d + c)]);
      write_row<T>(d_k, r, d, x.data());
      for (int64_t c = 0; c < d_v_dim; ++c) x[size_t(c)] = cvt<T>(sum_v[size_t(r * d_v_dim + c)]);
      write_row<T>(d_v, r, d_v_dim, x.data());
    }
  }
};

}  // namespace fc::cpu
