// `flashcheck fuzz --kernel NAME | --plugin lib.so (--seconds T | --cases N) [--seed S] [--regime LIST] [--out DIR]
// [--shard i/n] [--batch B] [--threads N] [--max-n N] [--max-d D] [--big [--big-max-n N] [--rows R]]`:
// the extreme-range campaign of fuzz/campaign.hpp. Exit 0 when every case held, 1 when one failed
// (each listed with its check and, with --out, saved as a regression case with a replay line), 2 on
// bad usage. With --out DIR, DIR/fuzz.json (merged across shards by `flashcheck merge`) is rewritten
// atomically every 30 s and at the end, and failing cases go to DIR/cases/.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/command.hpp"
#include "cli/options.hpp"
#include "cli/plugin_options.hpp"
#include "fuzz/campaign.hpp"
#include "io/atomic_file.hpp"
#include "io/errors.hpp"
#include "reference/gpu/oracle_select.hpp"
#include "io/numbers.hpp"
#include "reports/report.hpp"

namespace fc::cli {
namespace {

struct FuzzOptions {
  PluginArgs plugin;
  std::string kernel, out, shard, regimes;
  std::string oracle = "auto";  // --oracle
  double seconds = 0;
  uint64_t cases = 0, seed = 1;
  int batch = 256, threads = 0, max_n = 40, max_d = 16, rows = 64, big_max_n = 131072;
  uint64_t big_max_elements = uint64_t(3) << 30;
  int64_t only_batch = -1;
  bool big = false, as_json = false;
};

// "i/n" with 0 <= i < n, plain decimals.
std::pair<int, int> parse_shard(const std::string& s) {
  const size_t slash = s.find('/');
  uint64_t i = 0, n = 0;
  if (slash == std::string::npos || !io::parse_decimal_u64(s.substr(0, slash), &i) ||
      !io::parse_decimal_u64(s.substr(slash + 1), &n) || n == 0 || i >= n || n > 1u << 20)
    throw UsageError(fmt::format("--shard {}: expected i/n with 0 <= i < n", io::quoted(s)));
  return {int(i), int(n)};
}

std::vector<fuzz::Values> parse_regimes(const std::string& list) {
  std::vector<fuzz::Values> out;
  if (list.empty() || list == "all") return out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    fuzz::Values v;
    const std::string word = list.substr(at, comma - at);
    if (!fuzz::parse_values(word, &v)) {
      std::string names;
      for (int i = 0; i < int(fuzz::Values::kCount); ++i)
        names += std::string(i ? ", " : "") + fuzz::values_name(fuzz::Values(i));
      throw UsageError(fmt::format("--regime {}: not one of {} (or all)", io::quoted(word), names));
    }
    out.push_back(v);
    at = comma + 1;
  }
  return out;
}

int run_fuzz(const FuzzOptions& o) {
  if (o.kernel.empty() == o.plugin.path.empty()) throw UsageError("fuzz needs --kernel NAME or --plugin PATH");
  if (o.seconds <= 0 && o.cases == 0) throw UsageError("fuzz needs --seconds T or --cases N");
  apply_oracle(o.oracle);
  // A one-element problem is covered and fits: what stops it is the build or the device, for every case.
  if (std::string why; ref::oracle() == ref::OracleKind::Gpu && !ref::uses_gpu(ref::oracle(), Problem{}, false, &why))
    throw UsageError("--oracle gpu: " + why);
  std::unique_ptr<plugin::PluginKernel> subject;  // a plugin runs in its worker process
  const Kernel* k = nullptr;
  fuzz::CampaignOptions c;
  if (!o.plugin.path.empty()) {
    subject = open_plugin(o.plugin);
    k = &subject->kernel();
    c.replay_prefix = plugin_replay_prefix(o.plugin, *subject);
  } else {
    k = find_kernel(o.kernel);
    if (!k) throw UsageError(fmt::format("unknown kernel \"{}\" (see `flashcheck kernels`)", o.kernel));
    if (!device_present(k->info.device))
      throw UsageError(fmt::format("kernel \"{}\" needs a {} device, and none is present", o.kernel, k->info.device));
    if (k->info.kind != KernelKind::Attention)
      throw UsageError(
          fmt::format("kernel \"{}\" merges states; fuzz runs attention kernels (check runs the "
                      "merge laws)",
                      o.kernel));
    c.replay_prefix = "flashcheck check --kernel " + k->info.name;
  }
  c.seed = o.seed, c.seconds = o.seconds, c.cases = o.cases, c.batch = o.batch, c.threads = o.threads;
  std::tie(c.shard_index, c.shard_count) = o.shard.empty() ? std::pair{0, 1} : parse_shard(o.shard);
  c.values = parse_regimes(o.regimes);
  c.limits.max_n = o.max_n, c.limits.max_d = o.max_d;
  c.big = o.big, c.big_max_n = o.big_max_n, c.big_rows = o.rows, c.big_max_elements = o.big_max_elements;
  c.only_batch = o.only_batch;
  c.out = o.out;
  std::string report_path;
  if (!o.out.empty()) {  // a bad --out is refused before the campaign, not after it
    std::error_code ec;
    std::filesystem::create_directories(o.out + "/cases", ec);
    if (ec) throw UsageError(fmt::format("{}: cannot create the output folder: {}", o.out, ec.message()));
    report_path = o.out + "/fuzz.json";
    io::check_output_path(report_path);
    c.checkpoint = [report_path](const nlohmann::json& partial) {
      io::write_file_atomic(report_path, report::dump(partial));
    };
  }
  std::ostream& log = o.as_json ? std::cerr : std::cout;
  log << fmt::format("flashcheck fuzz: kernel {} ({}), seed {}, {}{}{}\n", k->info.name, k->info.device, o.seed,
                     o.cases ? fmt::format("{} cases", o.cases) : fmt::format("{} s", o.seconds),
                     o.shard.empty() ? "" : ", shard " + o.shard, o.big ? ", big shapes" : "");
  nlohmann::json r;
  try {
    r = fuzz::run_campaign(*k, c, log);
  } catch (const ref::OracleUnavailable& e) {  // a case the GPU oracle cannot take, under --oracle gpu
    throw UsageError(e.what());
  }
  for (const nlohmann::json& f : r["failures"])
    log << fmt::format(
        "  FAIL batch {} case {}: {}: {}{}\n", f["seq"].get<uint64_t>(), f["sub"].get<int64_t>(),
        f["check"].get<std::string>(), f["message"].get<std::string>(),
        f.contains("replay") ? "\n    replay (in " + o.out + "): " + f["replay"].get<std::string>() : "");
  if (!report_path.empty()) {
    io::write_file_atomic(report_path, report::dump(r));  // the bytes `flashcheck merge` writes
    log << fmt::format("wrote {}\n", report_path);
  }
  if (o.as_json) std::cout << report::dump(r);
  return r["verdict"]["status"] == "fail" ? kExitFail : kExitPass;
}

}  // namespace

Action setup_fuzz(CLI::App& app) {
  auto* sub = app.add_subcommand("fuzz", "Random extreme-range cases on one kernel against the certified reference");
  auto o = std::make_shared<FuzzOptions>();
  CLI::Option* kernel = sub->add_option("--kernel", o->kernel, "kernel name (see `flashcheck kernels`)");
  kernel->excludes(add_plugin_options(sub, o->plugin, PluginOptions::Run));
  sub->add_option("--seconds", o->seconds, "stop after T seconds")->check(decimal_unsigned());
  sub->add_option("--cases", o->cases, "stop after N cases (whole batches; shards merge exactly)")
      ->check(decimal_unsigned());
  sub->add_option("--seed", o->seed, "campaign seed (default 1)")->check(decimal_unsigned());
  sub->add_option("--regime", o->regimes,
                  "value modes, comma-separated: zero, small_int, grid, scaled, raw, sprinkle, constant (default all)");
  sub->add_option("--out", o->out, "write DIR/fuzz.json and each failing case to DIR/cases/");
  sub->add_option("--shard", o->shard, "run shard i of n (i/n): batches b = i mod n");
  sub->add_option("--batch", o->batch, "cases per launch (default 256)")
      ->check(decimal_unsigned())
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--threads", o->threads, "threads, one batch in flight on each (default: every hardware thread)")
      ->check(decimal_unsigned());
  sub->add_option("--max-n", o->max_n, "longest n_q, n_k (default 40)")
      ->check(decimal_unsigned())
      ->check(CLI::Range(1, 1 << 17));
  sub->add_option("--max-d", o->max_d, "largest head dim for kernels that take any (default 16)")
      ->check(decimal_unsigned())
      ->check(CLI::Range(1, 1024));
  sub->add_flag("--big", o->big, "big shapes: n up to --big-max-n, rows sampled against the certified oracle");
  sub->add_option("--big-max-n", o->big_max_n, "big mode: longest sequence (default 131072)")
      ->check(decimal_unsigned())
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--rows", o->rows, "big mode: rows checked per case (default 64)")->check(decimal_unsigned());
  sub->add_option("--big-max-elements", o->big_max_elements,
                  "big mode: most elements of q (default 3·2^30; 2^31 and beyond is where 32-bit offsets overflow)")
      ->check(decimal_unsigned());
  sub->add_option("--only-batch", o->only_batch, "run batch B alone (a failure's replay; with the same options)")
      ->check(decimal_unsigned());
  add_oracle_option(sub, o->oracle);
  sub->add_flag("--json", o->as_json, "print fuzz.json on stdout (progress goes to stderr)");
  return [o] { return run_fuzz(*o); };
}

}  // namespace fc::cli
