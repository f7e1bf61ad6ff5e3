// The varlen and paged layouts of an input file (docs/SEMANTICS.md): cu_seqlens_q and
// cu_seqlens_k I32 (batch + 1), packed q (total_q, heads_q, d), k and v (total_k, heads_kv, d), or
// paged k and v (num_pages, page_size, heads_kv, d) with page_table I32 (batch, pages per sequence).
// Here: the shapes of the offsets and the table, and the problem's sizes derived from them; their
// values are checked by validate (contract/tensor.hpp) once the Inputs exist.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "io/attention_io.hpp"

namespace fc::io {

namespace {


const HostTensor& index_tensor(const TensorFile& file, const char* name, size_t rank, const char* layout,
                               const std::function<FileError(FileFault, const std::string&)>& fail) {
  const HostTensor& t = file.tensors.at(name);
  if (t.dtype != DType::I32)
    throw fail(FileFault::BadVariant, fmt::format("{} is {}, expected I32", name, dtype_name(t.dtype)));
  if (t.shape.size() != rank)
    throw fail(FileFault::BadVariant, fmt::format("{} has shape {}, expected {}", name, shape_str(t.shape), layout));
  return t;
}

}  // namespace

void read_varlen(const TensorFile& file, const std::function<FileError(FileFault, const std::string&)>& fail,
                 bool paged, Problem& p) {
  const HostTensor& cu_q = index_tensor(file, "cu_seqlens_q", 1, "(batch + 1)", fail);
  const HostTensor& cu_k = index_tensor(file, "cu_seqlens_k", 1, "(batch + 1)", fail);
  if (cu_q.shape[0] < 2 || cu_q.shape[0] > std::numeric_limits<int32_t>::max())
    throw fail(FileFault::BadVariant,
               fmt::format("cu_seqlens_q has {} entries: a batch of b sequences needs b + 1 >= 2", cu_q.shape[0]));
  if (cu_k.shape != cu_q.shape)
    throw fail(FileFault::BadVariant,
               fmt::format("cu_seqlens_k has {} entries but cu_seqlens_q {}: one per sequence + 1", cu_k.shape[0],
                           cu_q.shape[0]));
  p.varlen = true;
  p.batch = int32_t(cu_q.shape[0] - 1);
  const int32_t* cq = cu_q.data<int32_t>();
  const int32_t* ck = cu_k.data<int32_t>();
  int64_t n_q = 0, n_k = 0;  // the longest sequences (validate checks the offsets themselves)
  for (int32_t b = 0; b < p.batch; ++b) {
    n_q = std::max<int64_t>(n_q, int64_t(cq[b + 1]) - cq[b]);
    n_k = std::max<int64_t>(n_k, int64_t(ck[b + 1]) - ck[b]);
  }
  p.n_q = int32_t(std::min<int64_t>(n_q, std::numeric_limits<int32_t>::max()));
  p.n_k = int32_t(std::min<int64_t>(n_k, std::numeric_limits<int32_t>::max()));
  const HostTensor& q = file.tensors.at("q");
  const HostTensor& k = file.tensors.at("k");
  p.total_q = q.shape[0];
  if (!paged) {
    p.total_k = k.shape[0];
    return;
  }
  const HostTensor& table = index_tensor(file, "page_table", 2, "(batch, pages per sequence)", fail);
  if (table.shape[0] != p.batch)
    throw fail(FileFault::BadVariant,
               fmt::format("page_table has {} rows for a batch of {} sequences", table.shape[0], p.batch));
  p.total_k = std::max<int64_t>(0, ck[p.batch]);
  p.num_pages = int32_t(k.shape[0]);
  p.page_size = int32_t(k.shape[1]);
  p.pages_per_seq = int32_t(std::min<int64_t>(table.shape[1], std::numeric_limits<int32_t>::max()));
  if (int64_t(p.pages_per_seq) * p.page_size < n_k)
    throw fail(FileFault::BadVariant, fmt::format("a sequence has {} keys but the page table holds {} pages of {}", n_k,
                                              p.pages_per_seq, p.page_size));
}

}  // namespace fc::io
