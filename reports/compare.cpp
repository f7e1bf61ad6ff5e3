#include "reports/compare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <stdexcept>
#include <utility>

#include "io/attention_io.hpp"
#include "io/safetensors.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "reports/cell.hpp"
#include "reports/report.hpp"
#include "reference/parallel.hpp"
#include "reports/run.hpp"
#include "verdict/verdict.hpp"

namespace fc::report {

using nlohmann::json;

namespace {

// The outputs file: o (and lse, d_q, d_k, d_v) shaped and typed for the inputs' problem. Names, dtypes
// and shapes are all it checks, so with `header` it makes every check and leaves the bytes empty.
Outputs read_outputs(const std::string& path, const Inputs& in, bool header = false) {
  io::TensorFile f = header ? io::read_safetensors_header(path) : io::read_safetensors(path);
  const Problem& p = in.p;
  Outputs out;
  auto take = [&](const char* name, HostTensor& dst, DType dtype, const std::vector<int64_t>& shape) {
    auto it = f.tensors.find(name);
    if (it == f.tensors.end()) return;
    HostTensor& t = it->second;
    if (t.dtype != dtype)
      throw io::FileError(io::FileFault::MixedDtypes, path,
                          fmt::format("tensor \"{}\" is {}, expected {} (the inputs' dtype for it; lse is {})", name,
                                      dtype_name(t.dtype), dtype_name(dtype), dtype_name(lse_dtype(p))));
    if (t.shape != shape)
      throw io::FileError(io::FileFault::BadShape, path,
                          fmt::format("tensor \"{}\" has shape [{}], expected [{}]", name, fmt::join(t.shape, ", "),
                                      fmt::join(shape, ", ")));
    dst = std::move(t);  // (each name taken once: a training shape's gradient is a quarter gigabyte)
  };
  for (const auto& [name, t] : f.tensors)
    if (name != "o" && name != "lse" && name != "d_q" && name != "d_k" && name != "d_v")
      throw io::FileError(io::FileFault::BadHeader, path,
                          fmt::format("unknown tensor {} (outputs are o, lse, d_q, d_k, d_v)", io::quoted(name)));
  if (!f.tensors.count("o")) throw io::FileError(io::FileFault::MissingTensor, path, "no tensor \"o\"");
  take("o", out.o, dtype_o(p), shape_o(p));
  take("lse", out.lse, lse_dtype(p), shape_lse(p));
  const int grads = int(f.tensors.count("d_q") + f.tensors.count("d_k") + f.tensors.count("d_v"));
  if (grads > 0) {
    if (grads < 3) throw io::FileError(io::FileFault::MissingTensor, path, "gradients need all of d_q, d_k and d_v");
    if (!in.has_d_o())
      throw io::FileError(io::FileFault::MissingTensor, path, "holds gradients but the inputs have no d_o");
    take("d_q", out.d_q, dtype_q(p), shape_q(p));
    take("d_k", out.d_k, dtype_kv(p), shape_kv(p));
    take("d_v", out.d_v, dtype_kv(p), shape_v(p));
  }
  return out;
}

// in with every tensor in the finest of its dtypes (exact: each coarser value is a value of it).
Inputs uniform_dtype(const Inputs& in) {
  const DtypeSet t = dtypes_of(in.p);
  DType fine = t.q;
  for (DType x : {t.kv, t.o})
    if (significand_bits(x) > significand_bits(fine)) fine = x;
  Inputs u = in;
  set_dtypes(u.p, {fine, fine, fine});
  for (HostTensor* x : {&u.q, &u.k, &u.v, &u.d_o})
    if (!x->shape.empty()) *x = HostTensor::from_f64(fine, x->shape, x->to_f64());
  return u;
}

// The same-precision baseline (cpu_naive on this machine's cores) costs about a nanosecond per
// score and head dim on one core, forward and backward (one head, 1024 x 32768, d 64, BF16: 4.27 s;
// reference/bench/README.md). Past --max-baseline-seconds it is left out: the verdict never depends on
// it, only the report's baseline columns, which then stay empty and the cell says why.
double baseline_seconds(const Problem& p, bool grads) {
  const double rows = p.varlen ? double(p.total_q) : double(p.batch) * p.n_q;
  const double pairs = rows * p.heads_q * double(p.n_k);
  return pairs * double(p.d + head_dim_v(p)) * 1e-9 * (grads ? 1.0 : 0.4) / ref::worker_threads();
}

ref::Precision precision(const CompareOptions& o, const Problem& p, int32_t block_n) {
  DType acc;
  if (!parse_dtype(o.accumulation.c_str(), &acc) || (acc != DType::F32 && acc != DType::F16 && acc != DType::F64))
    throw std::invalid_argument(fmt::format("--accumulation {}: expected F32, F16 or F64", o.accumulation));
  if (o.rounding != "truncate" && o.rounding != "nearest")
    throw std::invalid_argument(fmt::format("--rounding {}: expected truncate or nearest", o.rounding));
  if (o.model != "flash" && o.model != "naive")
    throw std::invalid_argument(fmt::format("--model {}: expected flash or naive", o.model));
  // The arithmetic of a kernel of that kind (contract/arithmetic.h): "truncate" one on tensor cores
  // (every row of the problem in one query tile: the walk past a row's keys is the longest it can
  // be), "nearest" cpu_tiled's (FA2) or cpu_naive's on acc; P rounded to storage or kept.
  Config cfg;
  cfg.block_m = p.n_q, cfg.block_n = block_n, cfg.accum = acc;
  ref::Precision pr = ref::precision_for(p, Arithmetic{});  // storage: the coarsest of per-tensor dtypes
  if (o.model == "naive") {
    pr.ar = cpu::naive_arithmetic(p, cfg);
    if (o.rounding == "truncate")  // directed rounding in an unknown order, FTZ: what a GPU may do
      for (Chain* c : {&pr.ar.s, &pr.ar.pv, &pr.ar.l, &pr.ar.d_o_o, &pr.ar.dp, &pr.ar.dq, &pr.ar.dkv})
        c->adder = Adder::AnyOrder, c->truncates = true, c->block = 0;
  } else if (o.rounding == "truncate") {
    pr.ar = tensor_core_arithmetic(pr.storage, p.n_q, block_n, 0);  // d_q one chain: longer than any split
  } else {
    pr.ar = cpu::tiled_arithmetic(p, cfg);
  }
  if (o.rounding == "truncate") pr.ar.flush_subnormals = true;
  if (o.model != "naive") pr.ar.rounds_p = o.p_in_storage;
  return pr;
}

}  // namespace

json compare_report(const CompareOptions& o, const Inputs& in, std::vector<std::pair<std::string, double>>* stages) {
  auto t0 = std::chrono::steady_clock::now();
  const auto stage = [&](const char* name) {  // the seconds since the last stage ended
    const auto t = std::chrono::steady_clock::now();
    if (stages) stages->emplace_back(name, std::chrono::duration<double>(t - t0).count());
    t0 = t;
  };
  const auto more = [&](const char* name) {  // the same, added to a stage recorded before
    const auto t = std::chrono::steady_clock::now();
    if (stages)
      for (auto& [n, seconds] : *stages)
        if (n == name) seconds += std::chrono::duration<double>(t - t0).count();
    t0 = t;
  };
  // Every check of the outputs file is on its header: made here, before the work, and the tensors read
  // on a thread of their own while the oracle runs (a training shape's outputs are a gigabyte).
  const Outputs header = read_outputs(o.outputs, in, true);
  if (o.block_n < 0) throw std::invalid_argument("--block-n must be >= 0");
  (void)precision(o, in.p, 64);  // option errors before the work
  std::future<Outputs> outputs = std::async(std::launch::async, [&o, &in] { return read_outputs(o.outputs, in); });
  // The case's hash and largest score (serial passes over the inputs, seconds on a training shape) on
  // a thread of their own while the oracle and the bound run.
  std::future<std::pair<uint64_t, double>> about = std::async(std::launch::async, [&in] {
    return std::pair{inputs_hash(in), score_max(in)};
  });
  // The inputs checked: the file's, less d_o where there are no gradients to audit (the forward's
  // bound only). Copied only then: a training shape's inputs are a gigabyte.
  Inputs forward_only;
  if (!header.has_grads()) forward_only = in, forward_only.d_o = HostTensor();
  const Inputs& checked = header.has_grads() ? in : forward_only;
  // Widened once, for the oracle and every tile's bound.
  const ref::Tensors64 checked64 = verdict::tensors64(checked);
  stage("outputs");
  const ref::Certified want = verdict::certify(checked, checked64);
  stage("oracle");
  const std::vector<int32_t> tiles = o.block_n > 0 || o.model == "naive" ? std::vector<int32_t>{o.block_n}
                                                                         : std::vector<int32_t>{16, 32, 64, 128, 256};
  std::vector<ref::Precision> precs;
  for (int32_t bn : tiles) precs.push_back(precision(o, in.p, bn));
  // The largest bound over the candidate tiles.
  const ref::Bounds bounds = verdict::bounds_for(checked, checked64, want, precs);
  stage("bound");
  // The file may have changed since its header was read: the checks ran again on what was read, and
  // it must still say what the header said of the gradients and lse.
  const Outputs got = outputs.get();
  if (got.has_grads() != header.has_grads() || got.lse.shape.empty() != header.lse.shape.empty())
    throw io::FileError(io::FileFault::Io, o.outputs, "changed while it was read");
  more("outputs");  // the wait for its tensors, where the oracle and the bound took less time
  CaseSpec c;
  c.id = "inputs";
  c.regime = "file";
  c.p = in.p;
  c.backward = got.has_grads();
  for (int64_t b = 0; in.p.varlen && b < in.p.batch; ++b) {  // element labels name the sequence
    c.len_q.push_back(int32_t(in.cu_seqlens_q.get(b + 1) - in.cu_seqlens_q.get(b)));
    c.len_k.push_back(int32_t(in.cu_seqlens_k.get(b + 1) - in.cu_seqlens_k.get(b)));
  }
  for (int64_t b = 0; in.p.padded && b <= in.p.batch; ++b) {  // and a padded token's slot
    const auto gap = [&](const HostTensor& at, const std::vector<int32_t>& len) {
      return int32_t(at.get(b) - (b == 0 ? 0.0 : at.get(b - 1) + len[size_t(b - 1)]));
    };
    c.pad_q.push_back(gap(in.cu_seqlens_q_padded, c.len_q));
    c.pad_k.push_back(gap(in.cu_seqlens_k_padded, c.len_k));
  }
  // The same-precision baseline on the same inputs, for the ratios.
  // Per-tensor dtypes: the baseline runs with every tensor in the finest of them, which holds every
  // input exactly (an F16 or BF16 value is an F32 value), so it answers the same problem.
  BaselineErrors base_err;
  const double base_s = baseline_seconds(in.p, c.backward);
  if (base_s <= o.max_baseline_seconds) {
    const Subject base = baseline_subject();
    Inputs uniform;  // (a copy only where the dtypes are mixed)
    if (mixed_dtypes(in.p)) uniform = uniform_dtype(checked);
    const Inputs& base_in = mixed_dtypes(in.p) ? uniform : checked;
    const CellRun base_run = run_cell(c, base_in, base_in, nullptr, want, base);
    base_err = max_abs_of(base_run.metrics);
  }
  stage("baseline");
  CellRun r;
  r.metrics = measure_outputs(checked, want, bounds, got, !got.lse.shape.empty());
  bool pass = true;
  for (const auto& [name, m] : r.metrics) pass = pass && m.pass;
  r.cell = {{"seq", 0},
            {"sub", 0},
            {"case", c.id},
            {"kernel", o.name},
            {"device", "external"},
            {"config", fmt::format("model={} accumulation={} rounding={} P={} block_n={}", o.model, o.accumulation,
                                   o.rounding, o.p_in_storage ? "storage" : "F32",
                                   o.block_n > 0 ? std::to_string(o.block_n) : "any of 16..256")},
            {"status", pass ? "pass" : "fail"}};
  json cell = finish_cell(c, r, base_err.empty() ? nullptr : &base_err);
  if (base_s > o.max_baseline_seconds)
    cell["baseline_skipped"] =
        fmt::format("the same-precision baseline would take about {:.3g} s on {} threads (--max-baseline-seconds {:g})",
                    base_s, ref::worker_threads(), o.max_baseline_seconds);
  cell["replay"] = fmt::format("flashcheck compare --inputs {} --outputs {}", o.inputs, o.outputs);
  const auto [hash, s_max] = about.get();
  json cases = json::array({case_json(c, hash, s_max)});
  json options = {{"inputs", o.inputs},
                  {"outputs", o.outputs},
                  {"name", o.name},
                  {"model", o.model},
                  {"accumulation", o.accumulation},
                  {"rounding", o.rounding},
                  {"p_in_storage", o.p_in_storage},
                  {"block_n", o.block_n}};
  json report = make_report("compare", options, cases, json::array({cell}), json::array());
  stage("metrics");
  return report;
}

}  // namespace fc::report
