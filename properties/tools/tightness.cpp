// Tightness and soundness of the error model on real kernels: for each kernel x dtype x regime,
// random cases of the `reference` law's generator (its shapes, tiles and masks), and per output
// tensor the largest measured/bound over every element of every case, with the median of the cases'
// largest. A ratio above 1 is a correct kernel outside its bound: the bound is unsound there, and
// the program says so and exits 1. Prints the Markdown table of docs/error-model.md.
//   bounds_tightness [--cases N] [--seed S] [--kernel NAME]... [--regime NAME]... [--dtype NAME]...
//                    [--long-n N] [--variants yes] [--judge declared|undeclared|undeclared-online]
// Defaults: 1000 cases, seed 1, every non-mutant kernel whose device is present, regimes normal and
// outliers, every dtype the kernel offers but fp64, --long-n 4096 (the long_row regime's longest row).
// --variants yes: every case becomes a variant problem of the variants the kernel declares (each joins
// with probability one half, properties/variant_gen.hpp). --judge: the kernel's declared arithmetic
// (default), or the arithmetic an undeclared kernel is charged (fc::undeclared_arithmetic: the union of
// the weights' normalisations), or that union without the lse-normalised weights (PFrom::Max).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "properties/laws.hpp"
#include "properties/variant_gen.hpp"
#include "reference/inputs64.hpp"
#include "verdict/verdict.hpp"

namespace {

using namespace fc;

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void usage(const std::string& why) {
  fmt::print(stderr, "bounds_tightness: {}\n", why);
  std::exit(2);
}

struct Options {
  int cases = 1000;
  uint64_t seed = 1;
  int32_t long_n = 4096;
  std::vector<std::string> kernels;
  std::vector<props::Regime> regimes{props::Regime::Normal, props::Regime::Outliers};
  std::vector<DType> dtypes;
  bool variants = false;
  std::string judge = "declared";
};

Options parse(int argc, char** argv) {
  Options o;
  bool regimes_given = false;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (a + 1 >= argc) usage(arg + " needs a value");
    const std::string val = argv[++a];
    char* end = nullptr;
    if (arg == "--cases") {
      o.cases = int(std::strtol(val.c_str(), &end, 10));
      if (*end || o.cases < 1) usage("--cases takes a positive integer");
    } else if (arg == "--seed") {
      o.seed = std::strtoull(val.c_str(), &end, 10);
      if (*end) usage("--seed takes an integer");
    } else if (arg == "--long-n") {
      o.long_n = int32_t(std::strtol(val.c_str(), &end, 10));
      if (*end || o.long_n < 256) usage("--long-n takes an integer >= 256");
    } else if (arg == "--variants") {
      if (val != "yes" && val != "no") usage("--variants takes yes or no");
      o.variants = val == "yes";
    } else if (arg == "--judge") {
      if (val != "declared" && val != "undeclared" && val != "undeclared-online")
        usage("--judge takes declared, undeclared or undeclared-online");
      o.judge = val;
    } else if (arg == "--kernel") {
      if (!find_kernel(val)) usage("unknown kernel " + val);
      o.kernels.push_back(val);
    } else if (arg == "--regime") {
      props::Regime r;
      if (!props::parse_regime(val, &r)) usage("unknown regime " + val);
      if (!regimes_given) o.regimes.clear(), regimes_given = true;
      o.regimes.push_back(r);
    } else if (arg == "--dtype") {
      DType t;
      if (!parse_dtype(val.c_str(), &t)) usage("unknown dtype " + val);
      o.dtypes.push_back(t);
    } else {
      usage("unknown option " + arg);
    }
  }
  if (o.kernels.empty())
    for (const Kernel& k : registry())
      if (!k.info.mutant && device_present(k.info.device) && k.info.kind == KernelKind::Attention)
        o.kernels.push_back(k.info.name);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const props::Law& law = *props::find_law("reference");
  const char* names[] = {"o", "lse", "d_q", "d_k", "d_v"};
  fmt::print("| kernel | dtype | regime | cases | o | lse | d_q | d_k | d_v | median case |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|\n");
  int unsound = 0;
  for (const std::string& name : opt.kernels) {
    const Kernel& k = *find_kernel(name);
    for (DType t : k.info.dtypes) {
      if (opt.dtypes.empty() ? t == DType::F64 : std::find(opt.dtypes.begin(), opt.dtypes.end(), t) == opt.dtypes.end())
        continue;
      for (props::Regime regime : opt.regimes) {
        props::GenSpec spec = props::spec_for(law, k);
        spec.dtypes = {t}, spec.regimes = {regime}, spec.long_n = opt.long_n;
        std::map<std::string, double> worst;
        std::vector<double> case_worst;
        int done = 0;
        for (int c = 0; c < opt.cases; ++c) {
          const rc::Random rnd(opt.seed * 7919 + uint64_t(c) * 104729 + uint64_t(regime) * 31 + uint64_t(t));
          props::Case cs = props::gen_case(spec)(rnd, 1 + c % 100).value();
          if (opt.variants) {
            props::Rng vr(cs.aux);
            std::string how;
            cs.in = props::with_variants(k.info.variants, cs.in, cs.cfg.block_n, vr, &how);
          }
          if (!claims(k, cs.in)) continue;
          const verdict::Run r = verdict::execute(k, cs.in, cs.cfg, true);
          if (!r.error.empty()) {
            fmt::print(stderr, "{}: {}\n", name, r.error);
            continue;
          }
          verdict::Oracle o = verdict::oracle(k, cs.in, cs.cfg);
          if (opt.judge != "declared") {
            ref::Precision prec{t, undeclared_arithmetic(t)};
            if (opt.judge == "undeclared-online") prec.ar.p_from = PFrom::Max;
            o.bounds = ref::error_bounds(cs.in.p, ref::tensors64(cs.in), o.ref, prec);
          }
          const std::vector<double>* ref[] = {&o.ref.value.o, &o.ref.value.lse, &o.ref.value.d_q, &o.ref.value.d_k,
                                              &o.ref.value.d_v};
          const std::vector<double>* bnd[] = {&o.bounds.o, &o.bounds.lse, &o.bounds.d_q, &o.bounds.d_k, &o.bounds.d_v};
          const HostTensor* got[] = {&r.out.o, &r.out.lse, &r.out.d_q, &r.out.d_k, &r.out.d_v};
          double here = 0;
          for (int x = 0; x < 5; ++x) {
            if (ref[x]->empty() || got[x]->shape.empty() || (x == 1 && !k.info.writes_lse)) continue;
            const DType dt = x == 1 ? (t == DType::F64 ? DType::F64 : DType::F32) : t;
            const ref::Verdict v = ref::within_bound(got[x]->to_f64(), *ref[x], *bnd[x], dt);
            const double ratio = v.ok ? v.ratio : (v.bound > 0 ? std::max(v.measured / v.bound, 1.0 + 1e-9) : INFINITY);
            if (!v.ok && !k.info.mutant) {  // a mutant outside its bound is the point of measuring it
              ++unsound;
              fmt::print(stderr, "UNSOUND {} {} {} case {}: {} {}\n{}\n", name, dtype_name(t),
                         props::regime_name(regime), c, names[x], v.why, props::describe(cs));
            }
            worst[names[x]] = std::max(worst[names[x]], ratio), here = std::max(here, ratio);
          }
          case_worst.push_back(here), ++done;
        }
        auto cell = [&](const char* n) { return worst.count(n) ? fmt::format("{:.3g}", worst[n]) : std::string("-"); };
        const std::string regime_cell = std::string(props::regime_name(regime)) + (opt.variants ? " + variants" : "");
        fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3g} |\n", name, dtype_name(t), regime_cell, done,
                   cell("o"), cell("lse"), cell("d_q"), cell("d_k"), cell("d_v"), median(case_worst));
        std::fflush(stdout);
      }
    }
  }
  if (unsound)
    fmt::print(stderr, "{} tensors of correct kernels outside their bound: the bound is unsound there\n", unsound);
  return unsound ? 1 : 0;
}
