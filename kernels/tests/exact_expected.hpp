// The exact oracle's answer for a kernel test (256-bit MPFR) and the scales its errors are read in:
// o relative to Σ_j P_ij |v_jk| (exact itself, run on |v|), lse absolute, gradients normwise.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/tests/test_util.hpp"
#include "reference/exact.hpp"
#include "reference/inputs64.hpp"

namespace fc::test {

struct Expected {
  ref::Result64 r;
  std::vector<double> o_mag;     // Σ_j P_ij |v_jk|, shaped like o
  std::vector<double> lse_unit;  // 1: absolute lse error
};

inline Expected expected_of(const Inputs& in) {
  Expected e;
  ref::Tensors64 t = ref::tensors64(in);
  e.r = ref::exact(in.p, t, 256);
  for (double& x : t.v) x = std::fabs(x);
  t.d_o.clear();
  e.o_mag = ref::exact(in.p, t, 256).o;
  e.lse_unit.assign(e.r.lse.size(), 1.0);
  return e;
}

// The largest of the five errors, each already divided by its scale.
inline double worst_error(const Outputs& out, const Expected& e) {
  return std::max({scaled_error(out.o.to_f64(), e.r.o, e.o_mag), scaled_error(out.lse.to_f64(), e.r.lse, e.lse_unit),
                   normwise_error(out.d_q.to_f64(), e.r.d_q), normwise_error(out.d_k.to_f64(), e.r.d_k),
                   normwise_error(out.d_v.to_f64(), e.r.d_v)});
}

}  // namespace fc::test
