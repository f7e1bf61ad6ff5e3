// `flashcheck audit`: every selected kernel over the sweep (dtypes x regimes x shapes, docs/audit.md)
// against the certified reference and each kernel's error bound. Writes DIR/report.json (+ .md,
// .html, run.json; --junit FILE), prints the summary. Exit 0: every cell within its bound; 1: a
// cell failed (or a kernel threw); 2: bad usage, unusable output path, or a reference failure.
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <thread>

#include "cli/audit_sweep.hpp"
#include "cli/command.hpp"
#include "cli/options.hpp"
#include "cli/plugin_options.hpp"
#include "io/atomic_file.hpp"
#include "io/attention_io.hpp"
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

struct AuditOptions {
  std::vector<std::string> kernels, dtypes, regimes, cases;
  bool quick = false, accumulation = false, as_json = false;
  uint64_t seed = 1;
  std::string out = "reports/out", junit, shard, save_case;
  int jobs = 0;
  std::string oracle = "auto";          // --oracle
  PluginArgs plugin;                    // --plugin lib.so: a kernel of the user's, audited like a registry kernel
  const ExternalKernel* ext = nullptr;  // or one given by the program embedding flashcheck (the C API)
};

// `plugin_prefix` ("flashcheck audit --plugin /abs/lib.so ...") replays the plugin's cells.
std::string replay_line(const AuditOptions& o, const std::string& plugin_prefix, const report::CaseSpec& c,
                        const report::Subject& s) {
  if (o.ext && s.device == "plugin")  // the embedding program's own command, e.g. python -m flashcheck audit
    return fmt::format("{}{} --case {} --seed {}", plugin_prefix, o.accumulation ? " --accumulation" : "", c.id,
                       o.seed);
  const std::string who = !plugin_prefix.empty() && s.device == "plugin"
                              ? plugin_prefix.substr(std::string("flashcheck audit").size())
                              : " --kernel " + s.name;
  return fmt::format("flashcheck audit{}{} --case {} --seed {}", o.accumulation ? " --accumulation" : "", who, c.id,
                     o.seed);
}

// The plugin as one more subject (it runs in a worker process: one call at a time).
std::string add_plugin(const AuditOptions& o, std::unique_ptr<plugin::Subject>& plug, report::Selection& sel) {
  if (o.plugin.path.empty() && !o.ext) return "";
  if (o.ext) {
    try {
      plug = o.ext->open(o.plugin);
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
  if (o.ext) return o.ext->replay_for("audit");
  std::string prefix = plugin_replay_prefix(o.plugin, *plug);  // "flashcheck check --plugin ..."
  return "flashcheck audit" + prefix.substr(std::string("flashcheck check").size());
}

// Writes the inputs of the one case named by --case (for `compare`, `check --inputs`).
int save_case(const AuditOptions& o) {
  if (o.cases.size() != 1) throw UsageError("--save-case needs exactly one --case");
  const report::CaseSpec c =
      case_by_id(o.cases[0], o.accumulation ? report::find_accumulation_case : report::find_case);
  io::write_file_atomic(o.save_case, io::serialize_safetensors(io::inputs_file(report::make_inputs(c, o.seed))));
  fmt::print("wrote {} ({})\n", o.save_case, c.id);
  return kExitPass;
}

int run_audit(const AuditOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  apply_oracle(o.oracle);
  if (!o.save_case.empty()) return save_case(o);
  const std::pair<int, int> shard = parse_shard(o.shard);
  report::PlanOptions plan;
  plan.quick = o.quick;
  plan.dtypes =
      o.accumulation && o.dtypes.empty() ? std::vector<DType>{DType::F16, DType::BF16} : parse_dtypes(o.dtypes);
  check_regimes(o.regimes, o.accumulation ? std::vector<std::string>{"normal", "positive_v"} : report::regime_names());
  if (o.quick && !o.accumulation)
    for (const std::string& r : o.regimes)
      if (report::full_plan_only(r)) throw UsageError(fmt::format("--regime {}: not in the --quick plan", r));
  plan.regimes = o.regimes;
  report::Selection sel;
  try {
    // With --plugin and no --kernel, the plugin alone (the baseline still lends its errors).
    if ((!o.plugin.path.empty() || o.ext) && o.kernels.empty())
      sel = report::Selection{};
    else
      sel = o.accumulation ? report::accumulation_subjects(o.kernels) : select_kernels(o.kernels);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  std::unique_ptr<plugin::Subject> plug;
  const std::string plugin_prefix = add_plugin(o, plug, sel);
  for (const report::Subject& s : sel.subjects)
    plan.gpu = plan.gpu || (s.device != "cpu" && !(s.device == "plugin" && plug->kernel().info.device == "cpu"));
  const std::vector<report::CaseSpec> cases =
      o.accumulation
          ? plan_cases(report::accumulation_plan(plan), o.cases, report::find_accumulation_case, sel.subjects, shard)
          : plan_cases(report::audit_plan(plan), o.cases, report::find_case, sel.subjects, shard);
  report::check_outputs(o.out, o.junit);  // before the long part

  report::RunOptions ro;
  ro.seed = o.seed;
  ro.jobs = o.jobs > 0 ? o.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  ro.what = o.accumulation ? "audit --accumulation" : "audit";
  ro.replay = [&o, &plugin_prefix](const report::CaseSpec& c, const report::Subject& s) {
    return replay_line(o, plugin_prefix, c, s);
  };
  const report::Subject baseline = report::baseline_subject();
  report::SweepResult res = report::run_sweep(cases, sel.subjects, &baseline, ro);
  if (!res.errors.empty()) {
    // The reference itself failed: no verdict can be given, and the previous report stays.
    for (const std::string& e : res.errors) fmt::print(stderr, "flashcheck: audit: reference failed on {}\n", e);
    return kExitUsage;
  }

  json options = {{"seed", o.seed},       {"quick", o.quick}, {"dtypes", json::array()}, {"kernels", sel.names},
                  {"regimes", o.regimes}, {"cases", o.cases}, {"gpu", plan.gpu}};
  for (DType t : plan.dtypes) options["dtypes"].push_back(dtype_name(t));
  json skipped = json::array();
  for (const auto& [k, why] : sel.skipped) skipped.push_back({{"kernel", k}, {"reason", why}});
  json r = report::make_report(o.accumulation ? "accumulation" : "audit", options, std::move(res.cases),
                               std::move(res.cells), skipped);
  if (shard.second > 1) r["shard"] = {{"index", shard.first}, {"count", shard.second}};

  report::RunInfo info;
  info.command = "flashcheck audit";  // the options are in report.json
  info.jobs = ro.jobs;
  info.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<std::string> wrote = report::write_outputs(o.out, o.junit, r, info);
  if (o.as_json) {
    fmt::print("{}", report::dump(r));
  } else {
    fmt::print("{}", report::render_markdown(r, false));
    if (!wrote.empty()) fmt::print("\nwrote {}\n", fmt::join(wrote, ", "));
  }
  const std::string status = r["verdict"]["status"];
  if (status == "empty") {
    fmt::print(stderr, "flashcheck: audit: no selected kernel claims any case of the sweep\n");
    return kExitUsage;
  }
  return status == "pass" ? kExitPass : kExitFail;
}

}  // namespace

Run setup_audit(CLI::App& app) { return setup_audit(app, nullptr); }

Run setup_audit(CLI::App& app, const ExternalKernel* ext) {
  auto* sub = app.add_subcommand("audit",
                                 "Audit kernels over a sweep of shapes, dtypes and regimes against the "
                                 "certified reference and their error bounds (docs/audit.md)");
  auto o = std::make_shared<AuditOptions>();
  o->ext = ext;
  sub->add_option("--kernel", o->kernels, "Kernel to audit (repeatable; default: every available non-mutant)");
  add_plugin_options(sub, o->plugin, ext ? PluginOptions::Embedded : PluginOptions::Run);
  sub->add_option("--dtype", o->dtypes, "F16, BF16, F32 (repeatable; default: all three)")->delimiter(',');
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
  return [o] { return run_audit(*o); };
}

}  // namespace fc::cli
