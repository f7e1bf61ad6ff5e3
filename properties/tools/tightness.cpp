// Tightness of the error model: for each kernel x dtype, random cases (normal and FA3-outlier
// regimes) and, per output tensor, quantiles of the per-case worst measured/bound and of every
// element's measured/bound. A bound a correct kernel exceeds (> 1) is a bug in the bound; one
// whose worst case stays below 1e-3 is a gate that sleeps. Prints a Markdown table.
//   tightness [cases=200] [seed=1]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "properties/execute.hpp"
#include "properties/laws.hpp"

namespace {

using namespace fc;

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[size_t(q * double(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  const int cases = argc > 1 ? std::atoi(argv[1]) : 200;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  fmt::print("| kernel | dtype | tensor | worst/case p50 | p90 | max | element p50 | p99 |\n");
  fmt::print("|---|---|---|---|---|---|---|---|\n");
  for (const char* name : {"cpu_tiled", "cpu_naive"}) {
    const Kernel& k = *find_kernel(name);
    for (DType t : {DType::F16, DType::BF16, DType::F32}) {
      props::GenSpec spec = props::spec_for(*props::find_law("reference"), k);
      spec.dtypes = {t};
      spec.regimes = {props::Regime::Normal, props::Regime::Outliers};
      std::map<std::string, std::vector<double>> worst, elems;
      for (int c = 0; c < cases; ++c) {
        const props::Case cs = props::gen_case(spec)(rc::Random(seed * 7919 + uint64_t(c)), 20 + c % 80).value();
        const props::Run r = props::execute(k, cs.in, cs.cfg, true);
        const props::Oracle o = props::oracle(k, cs.in, cs.cfg);
        auto add = [&](const char* tn, const HostTensor& got, const std::vector<double>& ref,
                       const std::vector<double>& bound) {
          double w = 0;
          for (size_t x = 0; x < ref.size(); ++x) {
            if (!std::isfinite(ref[x]) || bound[x] <= 0) continue;
            const double ratio = std::fabs(got.get(int64_t(x)) - ref[x]) / bound[x];
            w = std::max(w, ratio), elems[tn].push_back(ratio);
          }
          worst[tn].push_back(w);
        };
        add("o", r.out.o, o.ref.value.o, o.bounds.o);
        add("lse", r.out.lse, o.ref.value.lse, o.bounds.lse);
        add("d_q", r.out.d_q, o.ref.value.d_q, o.bounds.d_q);
        add("d_k", r.out.d_k, o.ref.value.d_k, o.bounds.d_k);
        add("d_v", r.out.d_v, o.ref.value.d_v, o.bounds.d_v);
      }
      for (const char* tn : {"o", "lse", "d_q", "d_k", "d_v"})
        fmt::print("| {} | {} | {} | {:.3g} | {:.3g} | {:.3g} | {:.3g} | {:.3g} |\n", name, dtype_name(t), tn,
                   quantile(worst[tn], 0.5), quantile(worst[tn], 0.9), quantile(worst[tn], 1.0),
                   quantile(elems[tn], 0.5), quantile(elems[tn], 0.99));
    }
  }
}
