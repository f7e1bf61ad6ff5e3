#include "io/tests/variant_files.hpp"

#include <cmath>
#include <limits>

namespace fc::io::testing {

namespace {

HostTensor ints(std::vector<int64_t> shape, const std::vector<int32_t>& x) {
  HostTensor t(DType::I32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, x[size_t(i)]);
  return t;
}

// Values on a 1/8 grid, exact in F16.
HostTensor values(DType t, std::vector<int64_t> shape, int seed) {
  HostTensor x(t, std::move(shape));
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, double((i * 7 + seed * 3) % 17 - 8) / 8);
  return x;
}

// A varlen problem from per-sequence lengths (heads 2/1, d 4, d_v as given), optionally paged.
Inputs varlen(const std::vector<int32_t>& len_q, const std::vector<int32_t>& len_k, int32_t d_v, int32_t page_size,
              int32_t num_pages, const std::vector<int32_t>& table) {
  Inputs in;
  Problem& p = in.p;
  p.heads_q = 2, p.heads_kv = 1, p.d = 4, p.d_v = d_v == 4 ? 0 : d_v, p.dtype = DType::F16, p.scale = 0.5;
  p.varlen = true, p.batch = int32_t(len_q.size()), p.n_q = p.n_k = 0;
  std::vector<int32_t> cu_q = {0}, cu_k = {0};
  for (size_t b = 0; b < len_q.size(); ++b) {
    cu_q.push_back(cu_q.back() + len_q[b]), cu_k.push_back(cu_k.back() + len_k[b]);
    p.n_q = std::max(p.n_q, len_q[b]), p.n_k = std::max(p.n_k, len_k[b]);
  }
  p.total_q = cu_q.back(), p.total_k = cu_k.back();
  in.cu_seqlens_q = ints({p.batch + 1}, cu_q);
  in.cu_seqlens_k = ints({p.batch + 1}, cu_k);
  if (page_size > 0) {
    p.page_size = page_size, p.num_pages = num_pages, p.pages_per_seq = int32_t(table.size()) / p.batch;
    in.page_table = ints({p.batch, p.pages_per_seq}, table);
  }
  in.q = values(DType::F16, shape_q(p), 1);
  in.k = values(DType::F16, shape_kv(p), 2);
  in.v = values(DType::F16, shape_v(p), 3);
  in.d_o = values(DType::F16, shape_o(p), 4);
  return in;
}

// The varlen problem with its sequences at padded offsets pad_q, pad_k (batch + 1 each): the packed
// tensors hold pad_*[batch] tokens, padding between the sequences.
Inputs padded(const Inputs& varlen, const std::vector<int32_t>& pad_q, const std::vector<int32_t>& pad_k) {
  Inputs in = varlen;
  Problem& p = in.p;
  p.padded = true, p.total_q = pad_q.back(), p.total_k = pad_k.back();
  in.cu_seqlens_q_padded = ints({p.batch + 1}, pad_q);
  in.cu_seqlens_k_padded = ints({p.batch + 1}, pad_k);
  in.q = values(DType::F16, shape_q(p), 1);
  in.k = values(DType::F16, shape_kv(p), 2);
  in.v = values(DType::F16, shape_v(p), 3);
  in.d_o = values(DType::F16, shape_o(p), 4);
  return in;
}

Inputs dense(int32_t n_q, int32_t n_k, Mask m);

// dense(n_q, n_k) with a mask tensor (bm, hm): boolean (dtype BOOL) or additive in `t`; row 1 hidden.
Inputs masked(int32_t n_q, int32_t n_k, DType t, int32_t bm, int32_t hm) {
  Inputs in = dense(n_q, n_k, Mask::None);
  Problem& p = in.p;
  p.mask_kind = t == DType::BOOL ? MaskKind::Bool : MaskKind::Additive,
  p.mask_dtype = t == DType::BOOL ? DType::F32 : t;
  p.mask_b = bm, p.mask_h = hm;
  in.mask = HostTensor(t, {bm, hm, n_q, n_k});
  for (int64_t x = 0; x < in.mask.numel(); ++x) {
    const int64_t i = (x / n_k) % n_q;
    const bool on = i != 1 && x % 3 != 0;
    in.mask.set(x, t == DType::BOOL ? (on ? 1.0 : 0.0)
                   : on             ? double(x % 5) - 2.5
                                    : -std::numeric_limits<double>::infinity());
  }
  return in;
}

Inputs dense(int32_t n_q, int32_t n_k, Mask m) {
  Inputs in;
  Problem& p = in.p;
  p.heads_q = 2, p.heads_kv = 2, p.n_q = n_q, p.n_k = n_k, p.d = 4, p.dtype = DType::F16, p.mask = m, p.scale = 0.5;
  in.q = values(DType::F16, shape_q(p), 1);
  in.k = values(DType::F16, shape_kv(p), 2);
  in.v = values(DType::F16, shape_v(p), 3);
  in.d_o = values(DType::F16, shape_o(p), 4);
  return in;
}

}  // namespace

std::vector<GoodVariant> good_variants() {
  std::vector<GoodVariant> g;
  g.push_back({"varlen", varlen({3, 0, 2}, {4, 2, 0}, 4, 0, 0, {})});
  g.push_back({"varlen_all_empty", varlen({0, 0}, {1, 0}, 4, 0, 0, {})});
  g.push_back({"paged", varlen({2, 3}, {5, 3}, 4, 2, 4, {3, 1, 0, 1, 0, 2})});
  g.push_back({"varlen_d_v", varlen({2, 1}, {3, 3}, 6, 0, 0, {})});
  Inputs w = dense(5, 7, Mask::CausalBottomRight);
  w.p.window_left = 2, w.p.window_right = 0;
  g.push_back({"window", w});
  Inputs sc = dense(3, 4, Mask::None);
  sc.p.softcap = 2.5;
  g.push_back({"softcap", sc});
  Inputs al = dense(3, 5, Mask::CausalTopLeft);
  al.p.alibi = true;
  al.alibi_slopes = HostTensor(DType::F32, {2});
  al.alibi_slopes.set(0, 0.5), al.alibi_slopes.set(1, 0.125);
  g.push_back({"alibi", al});
  Inputs sk = dense(4, 3, Mask::CausalBottomRight);  // row 0 sees no key: lse = the sink
  sk.p.sinks = true;
  sk.sinks = HostTensor(DType::F32, {2});
  sk.sinks.set(0, 0.75), sk.sinks.set(1, -std::numeric_limits<double>::infinity());
  g.push_back({"sinks", sk});
  // Lengths q (3, 0, 2), k (4, 2, 0): queries at 1, 5, 7 of 10 tokens, keys at 0, 6, 8 of 9.
  g.push_back({"padded_varlen", padded(varlen({3, 0, 2}, {4, 2, 0}, 4, 0, 0, {}), {1, 5, 7, 10}, {0, 6, 8, 9})});
  g.push_back({"mask_bool", masked(4, 5, DType::BOOL, 1, 2)});
  g.push_back({"mask_additive_f16", masked(3, 6, DType::F16, 1, 1)});
  Inputs bk = dense(5, 7, Mask::CausalBottomRight);
  bk.p.block_q = 2, bk.p.block_k = 3, bk.p.block_b = 1, bk.p.block_h = 2;
  bk.block_mask = HostTensor(DType::BOOL, {1, 2, 3, 3});
  for (int64_t x = 0; x < 18; ++x) bk.block_mask.set(x, x % 4 != 1 ? 1.0 : 0.0);
  g.push_back({"block_mask", bk});
  return g;
}

std::vector<BadVariantCase> malformed_variant_cases() {
  std::vector<BadVariantCase> c;
  const Inputs good = varlen({3, 0, 2}, {4, 2, 0}, 4, 0, 0, {});
  const Inputs paged = varlen({2, 3}, {5, 3}, 4, 2, 4, {3, 1, 0, 1, 0, 2});
  auto edit = [&](const Inputs& base, const std::function<void(TensorFile&)>& f) {
    TensorFile file = inputs_file(base);
    f(file);
    return serialize_safetensors(file);
  };
  auto add = [&](std::string label, std::string bytes, FileFault fault, std::string mention) {
    c.push_back({std::move(label), std::move(bytes), fault, std::move(mention)});
  };
  const Inputs pad = padded(good, {1, 5, 7, 10}, {0, 6, 8, 9});
  add("padded_q_alone", edit(pad, [](TensorFile& f) { f.tensors.erase("cu_seqlens_k_padded"); }), FileFault::BadVariant,
      "come together");
  add("padded_without_varlen",
      edit(dense(3, 4, Mask::None),
           [](TensorFile& f) {
             f.tensors["cu_seqlens_q_padded"] = ints({2}, {0, 3});
             f.tensors["cu_seqlens_k_padded"] = ints({2}, {0, 4});
           }),
      FileFault::BadVariant, "need cu_seqlens_q and cu_seqlens_k");
  add("padded_f32", edit(pad, [](TensorFile& f) { f.tensors["cu_seqlens_q_padded"] = HostTensor(DType::F32, {4}); }),
      FileFault::BadVariant, "cu_seqlens_q_padded is F32, expected I32");
  add("padded_entries",
      edit(pad,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_k_padded"] = ints({3}, {0, 6, 9});
           }),
      FileFault::BadVariant, "cu_seqlens_k_padded has shape [3], expected [4]");
  add("padded_negative",
      edit(pad,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_q_padded"] = ints({4}, {-1, 5, 7, 10});
           }),
      FileFault::BadVariant, "cu_seqlens_q_padded[0] = -1 is negative");
  add("padded_slots_short",
      edit(pad,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_q_padded"] = ints({4}, {1, 3, 7, 10});
           }),
      FileFault::BadVariant, "gives sequence 0 2 token slots");
  add("padded_decreasing",
      edit(pad,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_k_padded"] = ints({4}, {0, 6, 5, 9});
           }),
      FileFault::BadVariant, "gives sequence 1 -1 token slots");
  add("padded_total",
      edit(pad,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_q_padded"] = ints({4}, {1, 5, 7, 9});
           }),
      FileFault::BadVariant, "cu_seqlens_q_padded[3] = 9, but the packed tensors hold 10 tokens");
  add("padded_paged",
      edit(paged,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_q_padded"] = ints({3}, {0, 2, 5});
             f.tensors["cu_seqlens_k_padded"] = ints({3}, {0, 5, 8});
           }),
      FileFault::BadVariant, "padded offsets with paged K/V");
  add("cu_seqlens_q_alone", edit(good, [](TensorFile& f) { f.tensors.erase("cu_seqlens_k"); }), FileFault::BadVariant,
      "come together");
  add("page_table_without_varlen",
      edit(dense(3, 4, Mask::None),
           [](TensorFile& f) {
             f.tensors["page_table"] = ints({1, 1}, {0});
           }),
      FileFault::BadVariant, "page_table needs");
  add("cu_seqlens_q_f32", edit(good, [](TensorFile& f) { f.tensors["cu_seqlens_q"] = HostTensor(DType::F32, {4}); }),
      FileFault::BadVariant, "expected I32");
  add("cu_seqlens_q_rank_2",
      edit(good,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_q"] = ints({2, 2}, {0, 3, 3, 5});
           }),
      FileFault::BadVariant, "(batch + 1)");
  add("cu_seqlens_one_entry",
      edit(good,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_q"] = ints({1}, {0}), f.tensors["cu_seqlens_k"] = ints({1}, {0});
           }),
      FileFault::BadVariant, "b + 1 >= 2");
  add("cu_seqlens_lengths_differ",
      edit(good,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_k"] = ints({3}, {0, 4, 6});
           }),
      FileFault::BadVariant, "entries");
  add("cu_seqlens_q_decreasing",
      edit(good,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_q"] = ints({4}, {0, 3, 2, 5});
           }),
      FileFault::BadVariant, "decreases");
  add("cu_seqlens_q_not_from_0",
      edit(good,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_q"] = ints({4}, {1, 3, 3, 5});
           }),
      FileFault::BadVariant, "expected 0");
  add("cu_seqlens_q_total_mismatch",
      edit(good,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_q"] = ints({4}, {0, 3, 3, 4});
           }),
      FileFault::BadVariant, "packed tensors hold");
  add("cu_seqlens_k_past_the_keys",
      edit(good,
           [](TensorFile& f) {
             f.tensors["cu_seqlens_k"] = ints({4}, {0, 4, 6, 9});
           }),
      FileFault::BadVariant, "packed tensors hold");
  add("varlen_q_rank_4",
      edit(good,
           [](TensorFile& f) {
             f.tensors["q"] = HostTensor(DType::F16, {1, 5, 2, 4});
           }),
      FileFault::WrongRank, "(total_q, heads_q, d): varlen");
  add("page_table_entry_negative",
      edit(paged,
           [](TensorFile& f) {
             f.tensors["page_table"] = ints({2, 3}, {3, 1, -1, 1, 0, 2});
           }),
      FileFault::BadVariant, "is not a page");
  add("page_table_entry_past_pages",
      edit(paged,
           [](TensorFile& f) {
             f.tensors["page_table"] = ints({2, 3}, {3, 1, 4, 1, 0, 2});
           }),
      FileFault::BadVariant, "is not a page");
  add("page_table_rows",
      edit(paged,
           [](TensorFile& f) {
             f.tensors["page_table"] = ints({3, 2}, {3, 1, 0, 1, 0, 2});
           }),
      FileFault::BadVariant, "rows");
  add("page_table_too_small",
      edit(paged,
           [](TensorFile& f) {
             f.tensors["page_table"] = ints({2, 2}, {3, 1, 0, 1});
           }),
      FileFault::BadVariant, "page table holds");
  add("paged_k_rank_3",
      edit(paged,
           [](TensorFile& f) {
             f.tensors["k"] = HostTensor(DType::F16, {8, 1, 4}), f.tensors["v"] = HostTensor(DType::F16, {8, 1, 4});
           }),
      FileFault::WrongRank, "paged");
  Inputs al = dense(3, 5, Mask::CausalTopLeft);
  al.p.alibi = true;
  al.alibi_slopes = HostTensor(DType::F32, {2});
  add("alibi_slopes_f16", edit(al, [](TensorFile& f) { f.tensors["alibi_slopes"] = HostTensor(DType::F16, {2}); }),
      FileFault::BadVariant, "alibi_slopes is F16");
  add("alibi_slopes_length", edit(al, [](TensorFile& f) { f.tensors["alibi_slopes"] = HostTensor(DType::F32, {3}); }),
      FileFault::BadVariant, "alibi_slopes has shape");
  add("alibi_slope_nan", edit(al, [](TensorFile& f) { f.tensors["alibi_slopes"].set(1, std::nan("")); }),
      FileFault::BadVariant, "not finite");
  Inputs sk = dense(3, 5, Mask::None);
  sk.p.sinks = true;
  sk.sinks = HostTensor(DType::F32, {2});
  add("sinks_f64", edit(sk, [](TensorFile& f) { f.tensors["sinks"] = HostTensor(DType::F64, {2}); }),
      FileFault::BadVariant, "sinks is F64");
  add("sinks_length", edit(sk, [](TensorFile& f) { f.tensors["sinks"] = HostTensor(DType::F32, {1}); }),
      FileFault::BadVariant, "sinks has shape");
  add("sink_nan", edit(sk, [](TensorFile& f) { f.tensors["sinks"].set(0, std::nan("")); }), FileFault::BadVariant,
      "neither finite nor -inf");
  add("sink_plus_inf",
      edit(sk, [](TensorFile& f) { f.tensors["sinks"].set(1, std::numeric_limits<double>::infinity()); }),
      FileFault::BadVariant, "neither finite nor -inf");
  // Mask tensors and block masks (contract v3).
  const Inputs mb = masked(3, 4, DType::BOOL, 1, 1), ma = masked(3, 4, DType::F32, 1, 2);
  add("mask_f64",
      edit(ma,
           [](TensorFile& f) {
             f.tensors["mask"] = HostTensor(DType::F64, {1, 2, 3, 4});
           }),
      FileFault::UnknownDtype, "a boolean mask is BOOL, an additive one F16, BF16 or F32");
  add("mask_i32",
      edit(ma,
           [](TensorFile& f) {
             f.tensors["mask"] = HostTensor(DType::I32, {1, 2, 3, 4});
           }),
      FileFault::UnknownDtype, "tensor \"mask\" is I32");
  add("mask_rank",
      edit(mb,
           [](TensorFile& f) {
             f.tensors["mask"] = HostTensor(DType::BOOL, {3, 4});
           }),
      FileFault::BadVariant, "expected 4");
  add("mask_heads",
      edit(mb,
           [](TensorFile& f) {
             f.tensors["mask"] = HostTensor(DType::BOOL, {1, 3, 3, 4});
           }),
      FileFault::BadVariant, "H_m 1 or 2");
  add("mask_keys",
      edit(mb,
           [](TensorFile& f) {
             f.tensors["mask"] = HostTensor(DType::BOOL, {1, 1, 3, 5});
           }),
      FileFault::BadVariant, "mask has shape [1, 1, 3, 5], expected [1, 1, 3, 4]");
  add("mask_nan", edit(ma, [](TensorFile& f) { f.tensors["mask"].set(2, std::nan("")); }), FileFault::BadVariant,
      "mask[2] = nan is neither finite nor -inf");
  add("mask_plus_inf",
      edit(ma, [](TensorFile& f) { f.tensors["mask"].set(5, std::numeric_limits<double>::infinity()); }),
      FileFault::BadVariant, "mask[5] = inf is neither finite nor -inf");
  add("mask_bool_byte", edit(mb, [](TensorFile& f) { f.tensors["mask"].bytes[3] = 2; }), FileFault::BadVariant,
      "mask[3] holds byte 2");
  add("mask_varlen", edit(good, [&](TensorFile& f) { f.tensors["mask"] = mb.mask; }), FileFault::BadVariant,
      "for dense files");
  const Inputs bm = good_variants().back().in;  // the block mask
  add("block_mask_no_sizes", edit(bm, [](TensorFile& f) { f.metadata.erase("block_k"); }), FileFault::BadVariant,
      "needs metadata block_q and block_k");
  add("block_mask_size_zero", edit(bm, [](TensorFile& f) { f.metadata["block_q"] = "0"; }), FileFault::BadMetadata,
      "block_q \"0\" is not an integer in [1, 2^31)");
  add("block_mask_f32",
      edit(bm,
           [](TensorFile& f) {
             f.tensors["block_mask"] = HostTensor(DType::F32, {1, 2, 3, 3});
           }),
      FileFault::UnknownDtype, "a block mask is BOOL");
  add("block_mask_blocks",
      edit(bm,
           [](TensorFile& f) {
             f.tensors["block_mask"] = HostTensor(DType::BOOL, {1, 2, 3, 2});
           }),
      FileFault::BadVariant, "block_mask has shape [1, 2, 3, 2], expected [1, 2, 3, 3]");
  add("block_sizes_alone", edit(dense(3, 4, Mask::None), [](TensorFile& f) { f.metadata["block_q"] = "2"; }),
      FileFault::BadVariant, "without a tensor");
  for (const char* w : {"abc", "-2", "1.5", "", "+-1", "2147483648", "0x10"})
    add(std::string("window_left_") + w,
        edit(dense(3, 4, Mask::None), [&](TensorFile& f) { f.metadata["window_left"] = w; }), FileFault::BadMetadata,
        "window_left");
  add("window_right_junk", edit(dense(3, 4, Mask::None), [](TensorFile& f) { f.metadata["window_right"] = "1 "; }),
      FileFault::BadMetadata, "window_right");
  for (const char* s : {"-1", "nan", "inf", "x", ""})
    add(std::string("softcap_") + s, edit(dense(3, 4, Mask::None), [&](TensorFile& f) { f.metadata["softcap"] = s; }),
        FileFault::BadMetadata, "softcap");
  add("q_i32",
      edit(dense(3, 4, Mask::None),
           [](TensorFile& f) {
             f.tensors["q"] = HostTensor(DType::I32, {1, 2, 3, 4});
           }),
      FileFault::UnknownDtype, "F16, BF16, F32 or F64");
  add("d_o_with_d_not_d_v",
      edit(varlen({2, 1}, {3, 3}, 6, 0, 0, {}),
           [](TensorFile& f) {
             f.tensors["d_o"] = HostTensor(DType::F16, {3, 2, 4});
           }),
      FileFault::BadShape, "d_o");
  add("unknown_tensor_cu_seqlens",
      edit(good,
           [](TensorFile& f) {
             f.tensors["cu_seqlens"] = ints({4}, {0, 3, 3, 5});
           }),
      FileFault::UnknownTensor, "cu_seqlens");
  return c;
}

}  // namespace fc::io::testing
