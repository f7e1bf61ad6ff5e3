#include "properties/long_rows.hpp"

#include <array>
#include <cmath>
#include <random>

namespace fc::props {

const char* long_pattern_name(LongPattern p) {
  switch (p) {
    case LongPattern::RunOfX: return "run_of_x";
    case LongPattern::Alternating: return "alternating";
    case LongPattern::OneLarge: return "one_large";
    case LongPattern::TinyRun: return "tiny_run";
    case LongPattern::Random: return "random";
    case LongPattern::kCount: break;
  }
  return "?";
}

void fill_long_row(Case& c, LongPattern pattern, uint64_t seed, bool backward) {
  const Problem& p = c.in.p;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n01;
  c.in.q = HostTensor(dtype_q(p), shape_q(p));
  c.in.k = HostTensor(dtype_kv(p), shape_kv(p));
  c.in.v = HostTensor(dtype_kv(p), shape_kv(p));
  c.in.d_o = backward ? HostTensor(dtype_o(p), shape_q(p)) : HostTensor();
  const DType t_v = dtype_kv(p);  // the patterns are values of v
  // The run's head 2^e and the accumulator's ulp there (fp32, fp64 for fp64 storage): for fp16 the
  // head is 2^10 so that x and t stay within fp16's range (x = 6.2e-5, t = 3.0e-5).
  const int e = t_v == DType::F16 ? 10 : 0, acc_bits = t_v == DType::F64 ? 53 : 24;
  const double head = std::ldexp(1.0, e);
  const double x = round_to(t_v, 0.51 * std::ldexp(1.0, e - acc_bits + 1));  // 0.51 ulp of the head
  const double t = round_to(t_v, 0.99 * std::ldexp(1.0, e - 25));            // under the 2^-25 grid
  const int64_t n_k = p.n_k, d = p.d;
  const int64_t big = std::array<int64_t, 3>{0, n_k / 2, n_k - 1}[rng() % 3];  // one_large's key
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < p.heads_kv; ++g)
      for (int64_t j = 0; j < n_k; ++j)
        for (int64_t cc = 0; cc < d; ++cc) {
          const int64_t at = offset_kv(p, b, g, j) + cc;
          double v = 0, kv = 0;
          switch (pattern) {
            case LongPattern::RunOfX: v = j == 0 ? head : x; break;
            case LongPattern::Alternating: v = j % 2 ? -1.0 : 1.0; break;
            case LongPattern::OneLarge:  // q = e_0: s_j = scale k_j0, 20 above the rest at `big`
              v = n01(rng), kv = cc == 0 && j == big ? 20 / p.scale : 0.0;
              break;
            case LongPattern::TinyRun: v = j == 0 ? head : t; break;
            case LongPattern::Random: v = n01(rng), kv = n01(rng); break;
            case LongPattern::kCount: break;
          }
          c.in.v.set(at, v), c.in.k.set(at, kv);
        }
  for (int64_t x_at = 0; x_at < c.in.q.numel(); ++x_at) {
    const int64_t cc = x_at % d;
    double q = 0;
    if (pattern == LongPattern::OneLarge) q = cc == 0 ? 1.0 : 0.0;
    if (pattern == LongPattern::Random) q = n01(rng);
    c.in.q.set(x_at, q);
    if (backward) c.in.d_o.set(x_at, n01(rng));
  }
}

}  // namespace fc::props
