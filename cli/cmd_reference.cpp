// `flashcheck reference --inputs in.safetensors --out ref.safetensors`: the certified oracle's o and
// lse (and d_q, d_k, d_v when the inputs hold d_o), all F64, with the problem's metadata.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "cli/options.hpp"
#include "io/atomic_file.hpp"
#include "reference/gpu/oracle_select.hpp"
#include "io/attention_io.hpp"
#include "reference/certified.hpp"
#include "kernels/registry.hpp"
#include "reference/inputs64.hpp"

namespace fc::cli {

namespace {

struct ReferenceOptions {
  std::string inputs, out;
  ResourceLimits limits;
  std::string oracle = "auto";  // --oracle
};

double max_of(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, e);  // bounds are non-negative; a NaN bound stays visible below
  for (double e : x)
    if (e != e) return e;
  return m;
}

// The certified oracle's scope is finite magnitudes below 2^500 (only F64 files can exceed it);
// NaN and inf are in scope: they poison exactly the rows the contract says, reported uncertified.
void check_range(const std::string& file, const char* name, const std::vector<double>& x) {
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isfinite(x[i]) && std::fabs(x[i]) >= 0x1p500)
      throw io::FileError(
          io::FileFault::OutOfRange, file,
          fmt::format("tensor \"{}\" element {} = {:g} is beyond the certified oracle's range (|x| < 2^500)", name, i,
                      x[i]));
}

int run_reference(const ReferenceOptions& o) {
  apply_oracle(o.oracle);
  io::check_output_path(o.out, {o.inputs});  // before the work: output == input, a FIFO, no folder
  const Inputs in = io::read_inputs(o.inputs);
  const Problem& p = in.p;
  require_affordable(o.inputs, p, in.has_d_o(), o.limits);
  const ref::Tensors64 t = ref::tensors64(in);
  check_range(o.inputs, "q", t.q);
  check_range(o.inputs, "k", t.k);
  check_range(o.inputs, "v", t.v);
  check_range(o.inputs, "d_o", t.d_o);
  const ref::Certified c = ref::certify(p, t);

  Outputs out;
  // The inputs' layout: dense (batch, heads, n, d), varlen (total, heads, d), paged k-side.
  out.o = HostTensor::from_f64(DType::F64, shape_o(p), c.value.o);        // o: like q, head dim d_v
  out.lse = HostTensor::from_f64(DType::F64, shape_lse(p), c.value.lse);  // (batch, heads_q, n_q) | (heads_q, total_q)
  if (in.has_d_o()) {
    out.d_q = HostTensor::from_f64(DType::F64, shape_q(p), c.value.d_q);   // like q
    out.d_k = HostTensor::from_f64(DType::F64, shape_kv(p), c.value.d_k);  // like k
    out.d_v = HostTensor::from_f64(DType::F64, shape_v(p), c.value.d_v);   // like v
  }
  // The problem's metadata as the input file carries it (mask, scale, window, softcap), and the oracle's.
  std::map<std::string, std::string> meta = io::problem_metadata(p);
  meta["input_dtype"] = dtypes_str(p);
  meta["oracle"] = "certified";
  meta["max_err_o"] = io::exact_decimal(max_of(c.err.o));  // the oracle's own bound on |o - exact|
  meta["max_err_lse"] = io::exact_decimal(max_of(c.err.lse));
  io::write_outputs(o.out, out, meta, {o.inputs});
  const std::vector<std::string> variants = variant_names(variants_of(p));
  fmt::print("reference: {} -> {} (b={} h_q={} h_kv={} n_q={} n_k={} d={} {} {}{}{}{})\n", o.inputs, o.out, p.batch,
             p.heads_q, p.heads_kv, p.n_q, p.n_k, p.d, dtypes_str(p), mask_name(p.mask),
             variants.empty() ? "" : ", ", fmt::join(variants, " "), in.has_d_o() ? ", with gradients" : "");
  return kExitPass;
}

}  // namespace

Action setup_reference(CLI::App& app) {
  auto* sub = app.add_subcommand("reference",
                                 "Certified reference o, lse (+ d_q, d_k, d_v) of a safetensors input file, as F64");
  auto o = std::make_shared<ReferenceOptions>();
  sub->add_option("--inputs", o->inputs,
                  "Input safetensors: q, k, v (+ d_o, cu_seqlens_q/k, page_table, alibi_slopes, sinks, "
                  "cu_seqlens_q/k_padded); metadata mask, scale, window_left, window_right, softcap")
      ->required();
  sub->add_option("--out", o->out, "Output safetensors: o, lse (+ d_q, d_k, d_v) as F64")->required();
  add_limit_options(sub, o->limits);
  add_oracle_option(sub, o->oracle);
  return [o] { return run_reference(*o); };
}

}  // namespace fc::cli
