// `flashcheck audit`: every selected kernel over the sweep (dtypes x regimes x shapes, docs/audit.md)
// against the certified reference and each kernel's error bound. Writes DIR/report.json (+ .md,
// .html, run.json; --junit FILE), prints the summary. Exit 0: every cell within its bound; 1: a
// cell failed (or a kernel threw); 2: bad usage, unusable output path, or a reference failure.
#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/audit_sweep.hpp"
#include "cli/command.hpp"
#include "cli/options.hpp"
#include "cli/plugin_options.hpp"
#include "cli/requests.hpp"
#include "io/atomic_file.hpp"
#include "io/attention_io.hpp"
#include "io/errors.hpp"
#include "io/safetensors.hpp"
#include "reports/accumulation.hpp"
#include "reports/output.hpp"
#include "reports/render.hpp"
#include "reports/report.hpp"
#include "reports/run.hpp"
#include "reports/variant_plan.hpp"

namespace fc::cli {

namespace {

using nlohmann::json;

// `plugin_prefix` ("flashcheck audit --plugin /abs/lib.so ...") replays the plugin's cells.
std::string replay_line(const AuditRequest& o, bool ext, const std::string& plugin_prefix, const report::CaseSpec& c,
                        const report::Subject& s) {
  if (ext && s.device == "plugin")  // the embedding program's own command, e.g. python -m flashcheck audit
    return fmt::format("{}{} --case {} --seed {}", plugin_prefix, o.accumulation ? " --accumulation" : "", c.id,
                       o.seed);
  const std::string who = !plugin_prefix.empty() && s.device == "plugin"
                              ? plugin_prefix.substr(std::string("flashcheck audit").size())
                              : " --kernel " + s.name;
  return fmt::format("flashcheck audit{}{} --case {} --seed {}", o.accumulation ? " --accumulation" : "", who, c.id,
                     o.seed);
}

// The plugin as one more subject (it runs in a worker process: one call at a time).
std::string add_plugin(const AuditRequest& o, const ExternalKernel* ext, std::unique_ptr<plugin::PluginKernel>& plug,
                       report::Selection& sel) {
  if (o.plugin.path.empty() && !ext) return "";
  if (ext) {
    try {
      plug = ext->open(o.plugin);
    } catch (const plugin::LoadError& e) {
      throw UsageError(e.what());
    }
  } else {
    plug = open_plugin(o.plugin);
  }
  const Kernel& k = plug->kernel();
  report::Subject s = report::subject_of(k, report::audit_config(k));
  s.device = "plugin";
  s.exclusive = true;
  s.backward = s.backward && !o.accumulation;
  sel.subjects.push_back(std::move(s));
  sel.names.push_back(k.info.name);
  if (ext) return ext->replay_for("audit");
  std::string prefix = plugin_replay_prefix(o.plugin, *plug);  // "flashcheck check --plugin ..."
  return "flashcheck audit" + prefix.substr(std::string("flashcheck check").size());
}

// Writes the inputs of the one case named by --case (for `compare`, `check --inputs`).
Outcome save_case(const AuditRequest& o, std::ostream& out) {
  if (o.cases.size() != 1) throw UsageError("--save-case needs exactly one --case");
  const report::CaseSpec c =
      case_by_id(o.cases[0], o.accumulation ? report::find_accumulation_case : report::find_case);
  io::write_file_atomic(o.save_case, io::serialize_safetensors(io::inputs_file(report::make_inputs(c, o.seed))));
  out << fmt::format("wrote {} ({})\n", o.save_case, c.id);
  return Outcome{};
}

// The report's options block, as report.json records it.
json options_json(const AuditRequest& o, const report::PlanOptions& plan, const report::Selection& sel) {
  json options = {{"seed", o.seed},       {"quick", o.quick}, {"dtypes", json::array()}, {"kernels", sel.names},
                  {"regimes", o.regimes}, {"cases", o.cases}, {"gpu", plan.gpu}};
  for (DType t : plan.dtypes) options["dtypes"].push_back(dtype_name(t));
  return options;
}

// The accumulation audit's default dtypes: the kernel floats coarser than F32 (F16, BF16).
bool coarser_than_f32(DType t) { return kernel_float(t) && dtype_info(t).precision < dtype_info(DType::F32).precision; }

// The sweep's plan from the request: dtypes, regimes, quick.
report::PlanOptions plan_options(const AuditRequest& o) {
  report::PlanOptions plan;
  plan.quick = o.quick;
  plan.dtypes = o.accumulation && o.dtypes.empty() ? dtypes_in_order(coarser_than_f32) : parse_dtypes(o.dtypes);
  check_regimes(o.regimes, o.accumulation ? std::vector<std::string>{"normal", "positive_v"} : report::regime_names());
  if (o.quick && !o.accumulation)
    for (const std::string& r : o.regimes)
      if (report::full_plan_only(r)) throw UsageError(fmt::format("--regime {}: not in the --quick plan", r));
  plan.regimes = o.regimes;
  return plan;
}

// The registry kernels the request names (with --plugin or the C API's kernel and none named: none).
report::Selection registry_subjects(const AuditRequest& o, const ExternalKernel* ext) {
  try {
    if ((!o.plugin.path.empty() || ext) && o.kernels.empty()) return report::Selection{};
    return o.accumulation ? report::accumulation_subjects(o.kernels) : select_kernels(o.kernels);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

// Writes the report's files and prints its summary (or report.json); the exit code of its verdict.
Outcome finish_audit(const AuditRequest& o, const json& r, const report::RunInfo& info, std::ostream& out) {
  const std::vector<std::string> wrote = report::write_outputs(o.out, o.junit, r, info);
  Outcome res;
  res.json = report::dump(r);
  if (o.as_json) {
    out << res.json;
  } else {
    out << report::render_markdown(r, false);
    if (!wrote.empty()) out << fmt::format("\nwrote {}\n", fmt::join(wrote, ", "));
  }
  out.flush();
  const std::string status = r["verdict"]["status"];
  if (status == "empty") throw UsageError("audit: no selected kernel claims any case of the sweep");
  res.code = status == "pass" ? kExitPass : kExitFail;
  return res;
}

}  // namespace

Outcome run_audit(const AuditRequest& o, const ExternalKernel* ext) {
  const auto t0 = std::chrono::steady_clock::now();
  validate(o);
  std::ostream& out = ext && ext->out ? *ext->out : std::cout;
  apply_oracle(o.oracle);
  if (!o.save_case.empty()) return save_case(o, out);
  const std::pair<int, int> shard = parse_shard(o.shard);
  report::PlanOptions plan = plan_options(o);
  report::Selection sel = registry_subjects(o, ext);
  std::unique_ptr<plugin::PluginKernel> plug;
  const std::string plugin_prefix = add_plugin(o, ext, plug, sel);
  for (const report::Subject& s : sel.subjects)
    plan.gpu = plan.gpu || (s.device != "cpu" && !(s.device == "plugin" && plug->kernel().info.device == "cpu"));
  std::vector<report::CaseSpec> cases =
      o.accumulation
          ? plan_cases(report::accumulation_plan(plan), o.cases, report::find_accumulation_case, sel.subjects, shard)
          : plan_cases(report::audit_plan(plan), o.cases, report::find_case, sel.subjects, shard);
  if (!o.accumulation) report::whole_long_rows(cases, sel.subjects);  // every row, where the GPU checks them
  report::check_output_paths(o.out, o.junit);  // before the long part

  report::SweepOptions ro;
  ro.seed = o.seed;
  ro.jobs = o.jobs > 0 ? o.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  ro.what = o.accumulation ? "audit --accumulation" : "audit";
  ro.replay = [&o, ext, &plugin_prefix](const report::CaseSpec& c, const report::Subject& s) {
    return replay_line(o, ext != nullptr, plugin_prefix, c, s);
  };
  const report::Subject baseline = report::baseline_subject();
  report::SweepResult res = report::run_sweep(cases, sel.subjects, &baseline, ro);
  if (!res.errors.empty()) {
    // The reference itself failed: no verdict can be given, and the previous report stays.
    const size_t more = res.errors.size() - 1;
    throw UsageError(fmt::format("audit: reference failed on {}{}", res.errors.front(),
                                 more ? fmt::format(" (and on {} more cases)", more) : ""));
  }
  json skipped = json::array();
  for (const auto& [k, why] : sel.skipped) skipped.push_back({{"kernel", k}, {"reason", why}});
  json r = report::make_report(o.accumulation ? "accumulation" : "audit", options_json(o, plan, sel),
                               std::move(res.cases), std::move(res.cells), skipped);
  if (shard.second > 1) r["shard"] = {{"index", shard.first}, {"count", shard.second}};
  report::RunInfo info;
  info.command = "flashcheck audit";  // the options are in report.json
  info.jobs = ro.jobs;
  info.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return finish_audit(o, r, info, out);
}

void validate(const AuditRequest& o) {
  validate(o.plugin);
  if (o.jobs < 0 || o.jobs > 1024) throw UsageError(fmt::format("--jobs {}: expected 1 to 1024", o.jobs));
  if (o.oracle != "auto" && o.oracle != "cpu" && o.oracle != "gpu")
    throw UsageError(fmt::format("--oracle {}: expected cpu, gpu or auto", io::quoted(o.oracle)));
}

Action setup_audit(CLI::App& app) { return setup_audit(app, nullptr); }

Action setup_audit(CLI::App& app, const ExternalKernel* ext) {
  auto* sub = app.add_subcommand("audit",
                                 "Audit kernels over a sweep of shapes, dtypes and regimes against the "
                                 "certified reference and their error bounds (docs/audit.md)");
  auto o = std::make_shared<AuditRequest>();
  sub->add_option("--kernel", o->kernels, "Kernel to audit (repeatable; default: every available non-mutant)");
  add_plugin_options(sub, o->plugin, ext ? PluginOptions::Embedded : PluginOptions::Run);
  sub->add_option("--dtype", o->dtypes, dtype_names(kernel_float) + " (repeatable; default: every one)")
      ->delimiter(',');
  sub->add_option(
         "--regime", o->regimes,
         "normal, outliers, scores, causal_top_left, causal_bottom_right, gqa; the variants (on kernels "
         "declaring them): varlen, paged, window, softcap, alibi, d_v, strides; sinks, padded_varlen, mask_bool, "
         "mask_additive, block_mask (not with --quick)")
      ->delimiter(',');
  sub->add_option("--case", o->cases, "Run only this case id, e.g. F16/normal/n1024 (repeatable; replay lines)");
  sub->add_flag("--quick", o->quick, "The small sweep (N <= 256): seconds, for CI");
  sub->add_flag("--accumulation", o->accumulation,
                "The accumulation audit: cpu_tiled's accumulation, P-rounding, loop-order and tile variants");
  sub->add_option("--seed", o->seed, "Seed of the inputs (default 1)")->check(decimal_unsigned());
  sub->add_option("--out", o->out, "Folder for report.json, report.md, report.html, run.json (default reports/out)");
  sub->add_option("--junit", o->junit, "Also write JUnit XML to FILE");
  sub->add_option("--shard", o->shard, "Run shard i of n (i/n); `flashcheck merge` joins the shards' reports");
  sub->add_option("--jobs", o->jobs, "Cases in flight (default: the hardware threads); never changes the report")
      ->check(decimal_unsigned())
      ->check(CLI::Range(1, 1024));
  sub->add_option("--save-case", o->save_case, "With one --case: write its inputs as safetensors to FILE and exit");
  sub->add_flag("--json", o->as_json, "Print report.json instead of the summary");
  add_oracle_option(sub, o->oracle);
  return [o, ext] { return run_audit(*o, ext).code; };
}

}  // namespace fc::cli
