#include "io/attention_io.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fmt/format.h>
#include <limits>

#include "io/numbers.hpp"

namespace fc::io {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

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
        Fault::UnknownTensor, name,
        fmt::format("unknown tensor {} in {} file{}: expected {}", quoted(t), role, hint, fmt::join(allowed, ", ")));
  }
}

const std::vector<std::string>& input_names() {
  static const std::vector<std::string> names = {"q", "k", "v", "d_o"};
  return names;
}

const std::vector<std::string>& output_names() {
  static const std::vector<std::string> names = {"o", "lse", "d_q", "d_k", "d_v"};
  return names;
}

Inputs inputs_from(const std::string& name, TensorFile file) {
  auto fail = [&](Fault f, const std::string& what) { return FileError(f, name, what); };
  require_names(name, file, input_names(), "an input");
  for (const char* t : {"q", "k", "v"})
    if (!file.tensors.count(t)) throw fail(Fault::MissingTensor, fmt::format("missing tensor \"{}\"", t));
  const bool with_d_o = file.tensors.count("d_o") != 0;
  std::vector<std::string> names = {"q", "k", "v"};
  if (with_d_o) names.push_back("d_o");

  const HostTensor& q = file.tensors.at("q");
  for (const std::string& t : names) {
    const HostTensor& x = file.tensors.at(t);
    if (x.shape.size() != 4)
      throw fail(Fault::WrongRank, fmt::format("tensor \"{}\" has rank {} (shape {}), expected 4: (batch, heads, n, d)",
                                               t, x.shape.size(), shape_str(x.shape)));
    if (x.dtype != q.dtype)
      throw fail(Fault::MixedDtypes, fmt::format("tensor \"{}\" is {} but q is {}: q, k, v, d_o must share one dtype",
                                                 t, dtype_name(x.dtype), dtype_name(q.dtype)));
    for (int64_t s : x.shape)
      if (s <= 0 || s > std::numeric_limits<int32_t>::max())
        throw fail(Fault::BadShape, fmt::format("tensor \"{}\" has shape {}: every dimension must be in [1, 2^31)", t,
                                                shape_str(x.shape)));
  }
  const HostTensor& k = file.tensors.at("k");
  const HostTensor& v = file.tensors.at("v");
  if (k.shape[0] != q.shape[0])
    throw fail(Fault::BadShape, fmt::format("batch differs: q {} vs k {}", shape_str(q.shape), shape_str(k.shape)));
  if (k.shape[3] != q.shape[3])
    throw fail(Fault::BadShape,
               fmt::format("head dim d differs: q {} vs k {}", shape_str(q.shape), shape_str(k.shape)));
  if (v.shape != k.shape)
    throw fail(Fault::BadShape,
               fmt::format("v {} must have the shape of k {}", shape_str(v.shape), shape_str(k.shape)));
  if (q.shape[1] % k.shape[1] != 0)
    throw fail(Fault::BadShape, fmt::format("heads_q = {} is not a multiple of heads_kv = {}", q.shape[1], k.shape[1]));
  if (with_d_o && file.tensors.at("d_o").shape != q.shape)
    throw fail(Fault::BadShape, fmt::format("d_o {} must have the shape of q {}",
                                            shape_str(file.tensors.at("d_o").shape), shape_str(q.shape)));

  Inputs in;
  Problem& p = in.p;
  p.batch = int32_t(q.shape[0]);
  p.heads_q = int32_t(q.shape[1]);
  p.n_q = int32_t(q.shape[2]);
  p.d = int32_t(q.shape[3]);
  p.heads_kv = int32_t(k.shape[1]);
  p.n_k = int32_t(k.shape[2]);
  p.dtype = q.dtype;
  p.mask = Mask::None;
  p.scale = default_scale(p.d);
  if (auto it = file.metadata.find("mask"); it != file.metadata.end()) {
    bool ok = false;
    for (Mask m : {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight})
      if (it->second == mask_name(m)) p.mask = m, ok = true;
    if (!ok)
      throw fail(
          Fault::UnknownMask,
          fmt::format("unknown mask {} (expected none, causal_top_left or causal_bottom_right)", quoted(it->second)));
  }
  if (auto it = file.metadata.find("scale"); it != file.metadata.end())
    if (!parse_decimal(it->second, &p.scale))
      throw fail(Fault::BadScale, fmt::format("scale {} is not a finite decimal number", quoted(it->second)));
  if (!well_formed(p)) throw fail(Fault::BadShape, "not a well-formed attention problem");

  in.q = std::move(file.tensors.at("q"));
  in.k = std::move(file.tensors.at("k"));
  in.v = std::move(file.tensors.at("v"));
  if (with_d_o) in.d_o = std::move(file.tensors.at("d_o"));
  return in;
}

Inputs read_inputs(const std::string& path) { return inputs_from(path, read_safetensors(path)); }

std::string exact_decimal(double x) { return fmt::format("{}", x); }  // shortest round-trip form

TensorFile inputs_file(const Inputs& in) {
  TensorFile f;
  f.tensors["q"] = in.q;
  f.tensors["k"] = in.k;
  f.tensors["v"] = in.v;
  if (in.has_d_o()) f.tensors["d_o"] = in.d_o;
  f.metadata["mask"] = mask_name(in.p.mask);
  f.metadata["scale"] = exact_decimal(in.p.scale);
  return f;
}

TensorFile outputs_file(const Outputs& out, const std::map<std::string, std::string>& metadata) {
  TensorFile f;
  f.tensors["o"] = out.o;
  f.tensors["lse"] = out.lse;
  if (out.has_grads()) {
    f.tensors["d_q"] = out.d_q;
    f.tensors["d_k"] = out.d_k;
    f.tensors["d_v"] = out.d_v;
  }
  f.metadata = metadata;
  return f;
}

void write_outputs(const std::string& path, const Outputs& out, const std::map<std::string, std::string>& metadata,
                   const std::vector<std::string>& inputs) {
  write_safetensors(path, outputs_file(out, metadata), inputs);
}

}  // namespace fc::io
