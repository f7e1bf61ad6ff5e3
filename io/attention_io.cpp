#include "io/attention_io.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <limits>

#include "io/numbers.hpp"

namespace fc::io {

namespace {


// Spelling-insensitive form of a tensor name ("dO", "D_O", "do" -> "do"), to suggest the intended one.
std::string loose(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != '_' && c != '-' && c != '.') out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

void require_names(const std::string& name, const TensorFile& file, const std::vector<std::string>& allowed,
                   const char* role) {
  for (const auto& [t, x] : file.tensors) {
    if (std::find(allowed.begin(), allowed.end(), t) != allowed.end()) continue;
    std::string hint;
    for (const std::string& a : allowed)
      if (loose(a) == loose(t)) hint = fmt::format(" (did you mean \"{}\"?)", a);
    throw FileError(
        FileFault::UnknownTensor, name,
        fmt::format("unknown tensor {} in {} file{}: expected {}", io::quoted(t), role, hint, fmt::join(allowed, ", ")));
  }
}

const std::vector<std::string>& input_names() {
  static const std::vector<std::string> names = {
      "q",     "k",    "v",          "d_o",   "cu_seqlens_q", "cu_seqlens_k", "page_table", "alibi_slopes", "sinks",
      "mask", "block_mask", "cu_seqlens_q_padded", "cu_seqlens_k_padded"};
  return names;
}

const std::vector<std::string>& output_names() {
  static const std::vector<std::string> names = {"o", "lse", "d_q", "d_k", "d_v"};
  return names;
}

namespace {

using Fail = std::function<FileError(FileFault, const std::string&)>;

// q, k, v (+ d_o): floating dtypes (k and v one, d_o o's: q's unless "dtype_o" says otherwise), the
// expected rank, dimensions in [1, 2^31) but for the token axis of a packed tensor (first, `packed`),
// which may be 0.
void check_attention_tensors(const TensorFile& file, const std::vector<std::string>& names, const Fail& fail,
                             bool varlen, bool paged, DType o_dtype) {
  const HostTensor& k = file.tensors.at("k");
  for (const std::string& t : names) {
    const HostTensor& x = file.tensors.at(t);
    const bool kv = t == "k" || t == "v";
    const size_t rank = !varlen || (kv && paged) ? 4 : 3;
    const char* layout = !varlen       ? "(batch, heads, n, d)"
                         : kv && paged ? "(pages, page_size, heads_kv, d): paged"
                         : kv          ? "(total_k, heads_kv, d): varlen"
                                       : "(total_q, heads_q, d): varlen";
    if (!is_float(x.dtype))
      throw fail(FileFault::UnknownDtype, fmt::format("tensor \"{}\" is {}: q, k, v, d_o are {}", t,
                                                      dtype_name(x.dtype), dtype_names(is_float)));
    if (x.shape.size() != rank)
      throw fail(FileFault::WrongRank, fmt::format("tensor \"{}\" has rank {} (shape {}), expected {}: {}", t,
                                               x.shape.size(), shape_str(x.shape), rank, layout));
    if (t == "v" && x.dtype != k.dtype)
      throw fail(FileFault::MixedDtypes, fmt::format("tensor \"v\" is {} but k is {}: k and v share one dtype",
                                                 dtype_name(x.dtype), dtype_name(k.dtype)));
    if (t == "d_o" && x.dtype != o_dtype)
      throw fail(FileFault::MixedDtypes, fmt::format("tensor \"d_o\" is {} but o is {}: d_o has o's dtype (q's unless "
                                                 "metadata dtype_o names another)",
                                                 dtype_name(x.dtype), dtype_name(o_dtype)));
    const bool packed = varlen && !(kv && paged);
    for (size_t a = 0; a < x.shape.size(); ++a)
      if (x.shape[a] < (packed && a == 0 ? 0 : 1) || x.shape[a] > std::numeric_limits<int32_t>::max())
        throw fail(FileFault::BadShape, fmt::format("tensor \"{}\" has shape {}: every dimension must be in [{}, 2^31)",
                                                    t, shape_str(x.shape), packed && a == 0 ? "0 (tokens)" : "1"));
  }
}

// The head dims and heads of q, k, v, d_o in any layout: heads are axis 1 (paged k, v: axis 2), the
// head dim the last axis (d for q, k; d_v for v, d_o).
void check_heads_and_dims(const TensorFile& file, const Fail& fail, bool varlen, bool paged) {
  const HostTensor& q = file.tensors.at("q");
  const HostTensor& k = file.tensors.at("k");
  const HostTensor& v = file.tensors.at("v");
  const int64_t heads_q = q.shape[1], heads_kv = k.shape[paged ? 2 : 1];
  if (k.shape.back() != q.shape.back())
    throw fail(FileFault::BadShape,
               fmt::format("head dim d differs: q {} vs k {}", shape_str(q.shape), shape_str(k.shape)));
  std::vector<int64_t> v_like_k = k.shape;
  v_like_k.back() = v.shape.back();
  if (v.shape != v_like_k)
    throw fail(FileFault::BadShape, fmt::format("v {} must have the shape of k {} (its last axis, d_v, may differ)",
                                            shape_str(v.shape), shape_str(k.shape)));
  if (heads_q % heads_kv != 0)
    throw fail(FileFault::BadShape, fmt::format("heads_q = {} is not a multiple of heads_kv = {}", heads_q, heads_kv));
  if (!varlen && k.shape[0] != q.shape[0])
    throw fail(FileFault::BadShape, fmt::format("batch differs: q {} vs k {}", shape_str(q.shape), shape_str(k.shape)));
  if (auto it = file.tensors.find("d_o"); it != file.tensors.end()) {
    std::vector<int64_t> o_shape = q.shape;
    o_shape.back() = v.shape.back();
    if (it->second.shape != o_shape)
      throw fail(FileFault::BadShape, fmt::format("d_o {} must have the shape of o {} (q's, with v's head dim)",
                                              shape_str(it->second.shape), shape_str(o_shape)));
  }
}

// An integer metadata value >= -1 (a window side), or a finite decimal >= 0 (softcap).
int32_t window_side(const std::map<std::string, std::string>& meta, const char* key, const Fail& fail) {
  auto it = meta.find(key);
  if (it == meta.end()) return -1;
  int64_t x = 0;
  if (!parse_decimal_i64(it->second, &x) || x < -1 || x > std::numeric_limits<int32_t>::max())
    throw fail(FileFault::BadMetadata,
               fmt::format("{} {} is not an integer in [-1, 2^31) (-1: unbounded)", key, io::quoted(it->second)));
  return int32_t(x);
}

// The mask tensor ("mask": BOOL boolean, F32/F16/BF16 additive; (B_m, H_m, n_q, n_k)) and the block
// mask ("block_mask": BOOL, with metadata block_q, block_k): their kind and broadcast; validate()
// checks their shapes and values. Dense files only.
void read_masks(TensorFile& file, const Fail& fail, Problem& p, Inputs& in) {
  auto broadcast = [&](const char* name, const HostTensor& t, int32_t* b, int32_t* h) {
    if (t.shape.size() != 4)
      throw fail(FileFault::BadVariant, fmt::format("tensor \"{}\" has rank {} (shape {}), expected 4: (B_m, H_m, {})",
                                                name, t.shape.size(), shape_str(t.shape),
                                                std::string(name) == "mask" ? "n_q, n_k" : "query blocks, key blocks"));
    if (p.varlen)
      throw fail(FileFault::BadVariant, fmt::format("tensor \"{}\" is for dense files (no cu_seqlens)", name));
    const int64_t bm = t.shape[0], hm = t.shape[1];
    if (!(bm == 1 || bm == p.batch) || !(hm == 1 || hm == p.heads_q))
      throw fail(FileFault::BadVariant, fmt::format("tensor \"{}\" has shape {}: B_m is 1 or {}, H_m 1 or {}", name,
                                                shape_str(t.shape), p.batch, p.heads_q));
    *b = int32_t(bm), *h = int32_t(hm);
  };
  if (auto it = file.tensors.find("mask"); it != file.tensors.end()) {
    const DType t = it->second.dtype;
    if (t == DType::BOOL)
      p.mask_kind = MaskKind::Bool;
    else if (kernel_float(t))
      p.mask_kind = MaskKind::Additive, p.mask_dtype = t;
    else
      throw fail(FileFault::UnknownDtype,
                 fmt::format("tensor \"mask\" is {}: a boolean mask is BOOL, an additive one {}", dtype_name(t),
                             dtype_names(kernel_float)));
    broadcast("mask", it->second, &p.mask_b, &p.mask_h);
    in.mask = std::move(it->second);
  }
  const bool has_q = file.metadata.count("block_q") != 0, has_k = file.metadata.count("block_k") != 0;
  if (auto it = file.tensors.find("block_mask"); it != file.tensors.end()) {
    if (it->second.dtype != DType::BOOL)
      throw fail(FileFault::UnknownDtype,
                 fmt::format("tensor \"block_mask\" is {}: a block mask is BOOL", dtype_name(it->second.dtype)));
    if (!has_q || !has_k) throw fail(FileFault::BadVariant, "block_mask needs metadata block_q and block_k");
    for (auto [key, out] : {std::pair{"block_q", &p.block_q}, std::pair{"block_k", &p.block_k}}) {
      int64_t x = 0;
      if (!parse_decimal_i64(file.metadata.at(key), &x) || x < 1 || x > std::numeric_limits<int32_t>::max())
        throw fail(FileFault::BadMetadata, fmt::format("{} {} is not an integer in [1, 2^31)", key,
                                                   io::quoted(file.metadata.at(key))));
      *out = int32_t(x);
    }
    broadcast("block_mask", it->second, &p.block_b, &p.block_h);
    in.block_mask = std::move(it->second);
  } else if (has_q || has_k) {
    throw fail(FileFault::BadVariant, "metadata block_q, block_k without a tensor \"block_mask\"");
  }
}

}  // namespace

Inputs inputs_from(const std::string& name, TensorFile file) {
  const Fail fail = [&](FileFault f, const std::string& what) { return FileError(f, name, what); };
  require_names(name, file, input_names(), "an input");
  for (const char* t : {"q", "k", "v"})
    if (!file.tensors.count(t)) throw fail(FileFault::MissingTensor, fmt::format("missing tensor \"{}\"", t));
  const bool with_d_o = file.tensors.count("d_o") != 0;
  const bool varlen = file.tensors.count("cu_seqlens_q") || file.tensors.count("cu_seqlens_k");
  const bool paged = file.tensors.count("page_table") != 0;
  if (varlen && !(file.tensors.count("cu_seqlens_q") && file.tensors.count("cu_seqlens_k")))
    throw fail(FileFault::BadVariant, "cu_seqlens_q and cu_seqlens_k come together: a varlen file needs both");
  if (paged && !varlen)
    throw fail(FileFault::BadVariant, "page_table needs cu_seqlens_q and cu_seqlens_k (paged K/V is a varlen layout)");
  const bool padded = file.tensors.count("cu_seqlens_q_padded") || file.tensors.count("cu_seqlens_k_padded");
  if (padded && !(file.tensors.count("cu_seqlens_q_padded") && file.tensors.count("cu_seqlens_k_padded")))
    throw fail(FileFault::BadVariant,
               "cu_seqlens_q_padded and cu_seqlens_k_padded come together: a padded varlen file needs both");
  if (padded && !varlen)
    throw fail(FileFault::BadVariant,
               "cu_seqlens_q_padded and cu_seqlens_k_padded need cu_seqlens_q and cu_seqlens_k (padded varlen)");
  std::vector<std::string> names = {"q", "k", "v"};
  if (with_d_o) names.push_back("d_o");
  DType o_dtype = file.tensors.at("q").dtype;
  if (auto it = file.metadata.find("dtype_o"); it != file.metadata.end())
    if (!parse_dtype(it->second.c_str(), &o_dtype))
      throw fail(FileFault::UnknownDtype,
                 fmt::format("dtype_o {} is not a dtype ({})", io::quoted(it->second), dtype_names(is_float)));
  check_attention_tensors(file, names, fail, varlen, paged, o_dtype);
  check_heads_and_dims(file, fail, varlen, paged);

  Inputs in;
  Problem& p = in.p;
  const HostTensor& q = file.tensors.at("q");
  const HostTensor& k = file.tensors.at("k");
  const HostTensor& v = file.tensors.at("v");
  p.d = int32_t(q.shape.back());
  p.d_v = v.shape.back() == q.shape.back() ? 0 : int32_t(v.shape.back());
  set_dtypes(p, {q.dtype, k.dtype, o_dtype});
  p.heads_q = int32_t(q.shape[1]);
  p.heads_kv = int32_t(k.shape[paged ? 2 : 1]);
  if (varlen) {
    read_varlen(file, fail, paged, p);  // batch, lengths, totals, paging (variant_io.cpp)
    in.cu_seqlens_q = std::move(file.tensors.at("cu_seqlens_q"));
    in.cu_seqlens_k = std::move(file.tensors.at("cu_seqlens_k"));
    if (paged) in.page_table = std::move(file.tensors.at("page_table"));
    if (padded) {
      p.padded = true;
      in.cu_seqlens_q_padded = std::move(file.tensors.at("cu_seqlens_q_padded"));
      in.cu_seqlens_k_padded = std::move(file.tensors.at("cu_seqlens_k_padded"));
    }
  } else {
    p.batch = int32_t(q.shape[0]);
    p.n_q = int32_t(q.shape[2]);
    p.n_k = int32_t(k.shape[2]);
  }
  p.mask = Mask::None;
  p.scale = default_scale(p.d);
  if (auto it = file.metadata.find("mask"); it != file.metadata.end()) {
    bool ok = false;
    for (Mask m : {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight})
      if (it->second == mask_name(m)) p.mask = m, ok = true;
    if (!ok)
      throw fail(
          FileFault::UnknownMask,
          fmt::format("unknown mask {} (expected none, causal_top_left or causal_bottom_right)", io::quoted(it->second)));
  }
  if (auto it = file.metadata.find("scale"); it != file.metadata.end())
    if (!parse_decimal(it->second, &p.scale))
      throw fail(FileFault::BadScale, fmt::format("scale {} is not a finite decimal number", io::quoted(it->second)));
  p.window_left = window_side(file.metadata, "window_left", fail);
  p.window_right = window_side(file.metadata, "window_right", fail);
  if (auto it = file.metadata.find("softcap"); it != file.metadata.end())
    if (!parse_decimal(it->second, &p.softcap) || p.softcap < 0)
      throw fail(FileFault::BadMetadata,
                 fmt::format("softcap {} is not a finite decimal >= 0 (0: none)", io::quoted(it->second)));
  if (auto it = file.tensors.find("alibi_slopes"); it != file.tensors.end()) {
    p.alibi = true;
    in.alibi_slopes = std::move(it->second);
  }
  if (auto it = file.tensors.find("sinks"); it != file.tensors.end()) {
    p.sinks = true;
    in.sinks = std::move(it->second);
  }
  read_masks(file, fail, p, in);  // mask, block_mask (contract v3)

  in.q = std::move(file.tensors.at("q"));
  in.k = std::move(file.tensors.at("k"));
  in.v = std::move(file.tensors.at("v"));
  if (with_d_o) in.d_o = std::move(file.tensors.at("d_o"));
  // Everything the shapes above did not settle: the offsets' values, the page table's, the slopes.
  if (std::string e = validate(in); !e.empty())
    throw fail(varlen || paged || p.alibi || p.sinks || per_key_mask(p) ? FileFault::BadVariant : FileFault::BadShape,
               e);
  return in;
}

Inputs read_inputs(const std::string& path) { return inputs_from(path, read_safetensors(path)); }

std::string exact_decimal(double x) { return fmt::format("{}", x); }  // shortest round-trip form

TensorFile inputs_file(const Inputs& in) {
  TensorFile f;
  f.tensors["q"] = in.q.contiguous();
  f.tensors["k"] = in.k.contiguous();
  f.tensors["v"] = in.v.contiguous();
  if (in.has_d_o()) f.tensors["d_o"] = in.d_o.contiguous();
  if (in.p.varlen) f.tensors["cu_seqlens_q"] = in.cu_seqlens_q, f.tensors["cu_seqlens_k"] = in.cu_seqlens_k;
  if (is_paged(in.p)) f.tensors["page_table"] = in.page_table;
  if (in.p.alibi) f.tensors["alibi_slopes"] = in.alibi_slopes;
  if (in.p.sinks) f.tensors["sinks"] = in.sinks;
  if (has_mask_tensor(in.p)) f.tensors["mask"] = in.mask;
  if (has_block_mask(in.p)) f.tensors["block_mask"] = in.block_mask;
  if (in.p.padded)
    f.tensors["cu_seqlens_q_padded"] = in.cu_seqlens_q_padded,
    f.tensors["cu_seqlens_k_padded"] = in.cu_seqlens_k_padded;
  f.metadata = problem_metadata(in.p);
  return f;
}

std::map<std::string, std::string> problem_metadata(const Problem& p) {
  std::map<std::string, std::string> m = {{"mask", mask_name(p.mask)}, {"scale", exact_decimal(p.scale)}};
  if (p.window_left >= 0) m["window_left"] = fmt::format("{}", p.window_left);
  if (p.window_right >= 0) m["window_right"] = fmt::format("{}", p.window_right);
  if (p.softcap > 0) m["softcap"] = exact_decimal(p.softcap);
  if (dtype_o(p) != dtype_q(p)) m["dtype_o"] = dtype_name(dtype_o(p));  // k, v carry their own dtype
  if (has_block_mask(p)) m["block_q"] = fmt::format("{}", p.block_q), m["block_k"] = fmt::format("{}", p.block_k);
  return m;
}

TensorFile outputs_file(const Outputs& out, const std::map<std::string, std::string>& metadata) {
  TensorFile f;
  f.tensors["o"] = out.o.contiguous();
  f.tensors["lse"] = out.lse.contiguous();
  if (out.has_grads()) {
    f.tensors["d_q"] = out.d_q.contiguous();
    f.tensors["d_k"] = out.d_k.contiguous();
    f.tensors["d_v"] = out.d_v.contiguous();
  }
  f.metadata = metadata;
  return f;
}

void write_outputs(const std::string& path, const Outputs& out, const std::map<std::string, std::string>& metadata,
                   const std::vector<std::string>& inputs) {
  write_safetensors(path, outputs_file(out, metadata), inputs);
}

}  // namespace fc::io
