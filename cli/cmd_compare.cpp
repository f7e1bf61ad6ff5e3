// `flashcheck compare --inputs in.safetensors --outputs kernel.safetensors [--out DIR]`: tensors
// another program produced (o; lse, d_q, d_k, d_v when present) against the certified reference and
// the error bound, as a one-cell report in the audit's format (docs/compare.md). Exit 0: every
// tensor within its bound; 1: one is not; 2: unreadable or inconsistent files, bad options.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "io/attention_io.hpp"
#include "io/errors.hpp"
#include "reference/parallel.hpp"

#include "cli/command.hpp"
#include "cli/options.hpp"
#include "reports/compare.hpp"
#include "reports/output.hpp"
#include "reports/render.hpp"
#include "reports/report.hpp"

namespace fc::cli {

namespace {

struct CompareFlags {
  report::CompareOptions c;
  ResourceLimits limits;
  std::string out, junit;
  bool as_json = false;
  bool p_f32 = false;
  std::string oracle = "auto";  // --oracle
};

// The certified oracle's range is finite magnitudes below 2^500 (only F64 files reach past it).
// Blocks of elements on every thread; the first element out of range is named.
void check_range(const std::string& file, const char* name, const HostTensor& t) {
  constexpr int64_t kBlock = int64_t(1) << 20;
  const int64_t n = t.numel(), blocks = (n + kBlock - 1) / kBlock;
  std::vector<int64_t> first(size_t(blocks), -1);
  ref::parallel_for(blocks, [&](int64_t b) {
    for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i)
      if (std::isfinite(t.get(i)) && std::fabs(t.get(i)) >= 0x1p500) {
        first[size_t(b)] = i;
        return;
      }
  });
  for (const int64_t i : first)
    if (i >= 0)
      throw io::FileError(io::FileFault::OutOfRange, file,
                          fmt::format("tensor \"{}\" element {} = {:g} is beyond the certified oracle's range "
                                      "(|x| < 2^500)",
                                      name, i, t.get(i)));
}

int run_compare(CompareFlags o) {
  const auto t0 = std::chrono::steady_clock::now();
  o.c.p_in_storage = !o.p_f32;
  apply_oracle(o.oracle);
  const std::vector<std::string> inputs = {o.c.inputs, o.c.outputs};
  report::check_output_paths(o.out, o.junit, inputs);
  const Inputs in = io::read_inputs(o.c.inputs);
  require_affordable(o.c.inputs, in.p, in.has_d_o(), o.limits);
  check_range(o.c.inputs, "q", in.q), check_range(o.c.inputs, "k", in.k), check_range(o.c.inputs, "v", in.v);
  if (in.has_d_o()) check_range(o.c.inputs, "d_o", in.d_o);
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  report::RunInfo info;
  info.command = "flashcheck compare";
  info.stages.emplace_back("inputs", since(t0));
  nlohmann::json r;
  try {
    r = report::compare_report(o.c, in, &info.stages);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  info.elapsed_s = since(t0);  // run.json is written with the report: everything before the writing
  const std::vector<std::string> wrote = report::write_outputs(o.out, o.junit, r, info, inputs);
  if (o.as_json) {
    fmt::print("{}", report::dump(r));
  } else {
    fmt::print("{}", report::render_markdown(r, false));
    if (!wrote.empty()) fmt::print("\nwrote {}\n", fmt::join(wrote, ", "));
  }
  return r["verdict"]["status"] == "pass" ? kExitPass : kExitFail;
}

}  // namespace

Action setup_compare(CLI::App& app) {
  auto* sub = app.add_subcommand("compare",
                                 "Audit tensors another program produced against the certified "
                                 "reference and the error bound (docs/compare.md)");
  auto o = std::make_shared<CompareFlags>();
  sub->add_option("--inputs", o->c.inputs, "Input safetensors: q, k, v (+ d_o); metadata mask, scale")->required();
  sub->add_option("--outputs", o->c.outputs, "The program's outputs: o (+ lse, d_q, d_k, d_v)")->required();
  sub->add_option("--out", o->out, "Folder for report.json, report.md, report.html, run.json");
  sub->add_option("--junit", o->junit, "Also write JUnit XML to FILE");
  sub->add_option("--name", o->c.name, "The kernel's name in the report (default: outputs)");
  sub->add_option("--model", o->c.model, "flash (fused online softmax, default) or naive (S and P stored)");
  sub->add_option("--accumulation", o->c.accumulation, "Accumulation type: F32 (default), F16, F64");
  sub->add_option("--rounding", o->c.rounding, "truncate (tensor cores, default) or nearest (IEEE)");
  sub->add_option("--block-n", o->c.block_n, "kBlockN of the kernel (default: unknown, the worst of 16..256)")
      ->check(decimal_unsigned());
  sub->add_flag("--p-f32", o->p_f32, "P stays fp32 before P·V (default: rounded to the storage type)");
  sub->add_option("--max-baseline-seconds", o->c.max_baseline_seconds,
                  "Leave out the same-precision baseline where it is estimated to take longer (default 60; 0: never)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--json", o->as_json, "Print report.json instead of the summary");
  add_oracle_option(sub, o->oracle);
  add_limit_options(sub, o->limits);
  return [o] { return run_compare(*o); };
}

}  // namespace fc::cli
