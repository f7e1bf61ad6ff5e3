// `flashcheck audit [--out DIR] [--json]`: every available non-mutant kernel on the embedded default
// sweep against the certified reference; a table of kernel x dtype -> max scaled o error, max |Δlse|,
// max normwise gradient error, with the same-precision baseline (cpu_naive) beside each for context.
// This first audit only reports (exit 0); kernels or inputs that error give exit 2.
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "cli/audit_sweep.hpp"
#include "cli/command.hpp"
#include "io/atomic_file.hpp"
#include "kernels/registry.hpp"

namespace fc::cli {

namespace {

using nlohmann::json;

constexpr const char* kBaseline = "cpu_naive";
const DType kDtypes[] = {DType::F16, DType::BF16, DType::F32};

struct Cell {
  int cases = 0;
  Errors err;              // worst over cases (and configs)
  std::string worst_case;  // label of the case with the largest o error
  int refused = 0;         // (case, config) runs the kernel declined as unsupported
  nlohmann::json per_case = nlohmann::json::array();
};

struct Options {
  std::string out;
  bool as_json = false;
};

// Every config a kernel offers (its default when it lists none): the audit reports the worst.
std::vector<Config> configs_of(const Kernel& k) {
  return k.info.configs.empty() ? std::vector<Config>{Config{}} : k.info.configs;
}

json num(double x) {
  if (std::isfinite(x)) return x;
  return x != x ? "nan" : (x > 0 ? "inf" : "-inf");  // JSON has no NaN/inf literals
}

json errors_json(const Errors& e) {
  json j = {{"o_scaled_err", num(e.o)}, {"lse_abs_err", num(e.lse)}};
  j["grad_normwise_err"] = e.has_grad ? num(e.grad) : json(nullptr);
  return j;
}

std::string fmt_err(double x) { return x != x ? "NaN" : fmt::format("{:.2e}", x); }

}  // namespace

int run_audit(const Options& opt) {
  const std::string report_path = opt.out.empty() ? "" : (std::filesystem::path(opt.out) / "audit.json").string();
  if (!opt.out.empty()) {  // a bad --out is refused before the sweep, not after it
    std::error_code ec;
    std::filesystem::create_directories(opt.out, ec);
    if (ec) throw UsageError(fmt::format("{}: cannot create the output folder: {}", opt.out, ec.message()));
    io::check_output_path(report_path);
  }
  std::vector<const Kernel*> kernels;
  std::map<std::string, std::string> skipped;  // kernel -> reason
  for (const Kernel& k : registry()) {
    if (k.info.mutant) continue;
    if (device_present(k.info.device))
      kernels.push_back(&k);
    else
      skipped[k.info.name] = "no " + k.info.device + " device on this machine";
  }

  // (kernel, dtype) -> worst errors; keyed by positions so the table follows registry and kDtypes order.
  std::map<std::pair<size_t, size_t>, Cell> cells;
  auto kernel_index = [&](const std::string& name) {
    for (size_t i = 0; i < kernels.size(); ++i)
      if (kernels[i]->info.name == name) return i;
    return kernels.size();  // absent
  };
  const size_t base_index = kernel_index(kBaseline);
  std::vector<std::string> errors;
  json sweep = json::array();
  uint64_t index = 0;
  for (size_t ti = 0; ti < std::size(kDtypes); ++ti) {
    const DType t = kDtypes[ti];
    for (const SweepCase& c : default_sweep(t)) {
      const Inputs in = make_inputs(c, index++);
      const ref::Certified want = reference_of(in);
      sweep.push_back({{"label", c.label},
                       {"dtype", dtype_name(t)},
                       {"batch", c.p.batch},
                       {"heads_q", c.p.heads_q},
                       {"heads_kv", c.p.heads_kv},
                       {"n_q", c.p.n_q},
                       {"n_k", c.p.n_k},
                       {"d", c.p.d},
                       {"mask", mask_name(c.p.mask)},
                       {"scale", c.p.scale},
                       {"amp", c.amp}});
      for (size_t ki = 0; ki < kernels.size(); ++ki) {
        const Kernel* k = kernels[ki];
        if (!claims(*k, in.p)) continue;
        const bool backward = k->info.backward && bool(k->backward);
        try {
          Cell& cell = cells[{ki, ti}];
          Errors here;
          int ran = 0;
          for (const Config& cfg : configs_of(*k)) {
            Outputs got;
            try {
              got = backward ? run_forward_backward(*k, in, cfg) : run_forward(*k, in, cfg);
            } catch (const std::invalid_argument& e) {
              // A listed tile that this problem's shape does not admit (e.g. a GPU tile for another d):
              // a declared refusal, not a wrong answer. Counted and reported, never silently dropped.
              if (std::string(e.what()).find("unsupported") == std::string::npos) throw;
              cell.refused++;
              continue;
            }
            here = worst(here, measure(got, want));
            ran++;
          }
          if (ran == 0) continue;
          if (cell.cases == 0 || !(here.o <= cell.err.o)) cell.worst_case = c.label;  // NaN counts as worse
          cell.err = worst(cell.err, here);
          json one = {{"label", c.label}};
          one.update(errors_json(here));
          cell.per_case.push_back(one);
          cell.cases++;
        } catch (const std::exception& e) {
          errors.push_back(fmt::format("{} on {} {}: {}", k->info.name, c.label, dtype_name(t), e.what()));
        }
      }
    }
  }

  json results = json::array();
  for (const auto& [key, cell] : cells) {
    if (cell.cases == 0) continue;
    json r = {
        {"kernel", kernels[key.first]->info.name}, {"dtype", dtype_name(kDtypes[key.second])}, {"cases", cell.cases}};
    r.update(errors_json(cell.err));
    r["worst_case"] = cell.worst_case;
    r["refused_runs"] = cell.refused;
    r["per_case"] = cell.per_case;
    if (auto b = cells.find({base_index, key.second}); b != cells.end()) r["baseline"] = errors_json(b->second.err);
    results.push_back(r);
  }
  json refused_json = json::array();
  for (const auto& [key, cell] : cells)
    if (cell.refused > 0)
      refused_json.push_back({{"kernel", kernels[key.first]->info.name},
                              {"dtype", dtype_name(kDtypes[key.second])},
                              {"refused_runs", cell.refused},
                              {"cases", cell.cases}});
  json skipped_json = json::array();
  for (const auto& [name, why] : skipped) skipped_json.push_back({{"kernel", name}, {"reason", why}});
  const json report = {{"baseline", kBaseline},   {"sweep", sweep},          {"results", results},
                       {"skipped", skipped_json}, {"refused", refused_json}, {"errors", errors}};

  if (opt.as_json) {
    fmt::print("{}\n", report.dump(2));
  } else {
    fmt::print("flashcheck audit: {} problems ({} per dtype), certified reference; errors are maxima over cases\n",
               sweep.size(), sweep.size() / std::size(kDtypes));
    fmt::print(
        "o: |Δo|/Σ_j P_ij|v_jk|   lse: |Δlse|   grad: max normwise ‖Δg‖/‖g‖ over d_q d_k d_v   "
        "[brackets]: {} on the same cases\n\n",
        kBaseline);
    fmt::print("{:<22} {:<5} {:>5}  {:>9} {:>11}  {:>9} {:>11}  {:>9} {:>11}  {}\n", "kernel", "dtype", "cases", "o",
               "[naive]", "lse", "[naive]", "grad", "[naive]", "worst o case");
    for (const auto& [key, cell] : cells) {
      if (cell.cases == 0) continue;
      auto b = cells.find({base_index, key.second});
      auto base = [&](double Errors::*f, bool grad) {
        if (b == cells.end() || (grad && !b->second.err.has_grad)) return std::string("[—]");
        return "[" + fmt_err(b->second.err.*f) + "]";
      };
      fmt::print("{:<22} {:<5} {:>5}  {:>9} {:>11}  {:>9} {:>11}  {:>9} {:>11}  {}\n", kernels[key.first]->info.name,
                 dtype_name(kDtypes[key.second]), cell.cases, fmt_err(cell.err.o), base(&Errors::o, false),
                 fmt_err(cell.err.lse), base(&Errors::lse, false), cell.err.has_grad ? fmt_err(cell.err.grad) : "—",
                 base(&Errors::grad, true), cell.worst_case);
    }
    for (const auto& [key, cell] : cells)
      if (cell.refused > 0)
        fmt::print("{} {}: {} (case, tile) runs refused as unsupported{}\n", kernels[key.first]->info.name,
                   dtype_name(kDtypes[key.second]), cell.refused, cell.cases == 0 ? "; no case ran" : "");
    for (const auto& [name, why] : skipped) fmt::print("skipped {}: {}\n", name, why);
  }
  if (!opt.out.empty()) {
    io::write_file_atomic(report_path, report.dump(2) + '\n');  // the previous report survives a failed write
    if (!opt.as_json) fmt::print("\nwrote {}\n", report_path);
  }
  if (!errors.empty()) {
    // The table is already out; the failures go to stderr, one line each, and the exit code says 2.
    for (const std::string& e : errors) fmt::print(stderr, "flashcheck: audit: {}\n", e);
    return kExitUsage;
  }
  return kExitPass;
}

Run setup_audit(CLI::App& app) {
  auto* sub =
      app.add_subcommand("audit", "Audit every available kernel on the default sweep against the certified reference");
  auto o = std::make_shared<Options>();
  sub->add_option("--out", o->out, "Also write DIR/audit.json");
  sub->add_flag("--json", o->as_json, "Print the report as JSON instead of the table");
  return [o] { return run_audit(*o); };
}

}  // namespace fc::cli
