// The exact oracle's multiprecision core, exposed for tests that must stay in multiprecision
// (finite differences, precision comparisons). Everything here works at the precision set by a
// PrecisionGuard; values are boost::multiprecision::mpfr_float (MPFR backend).
#pragma once

#include <boost/multiprecision/mpfr.hpp>
#include <vector>

#include "contract/attention.h"
#include "reference/oracle.hpp"

namespace fc::ref::detail {

using mp = boost::multiprecision::mpfr_float;

// Sets the default MPFR precision to at least `bits` for its lifetime and restores the old one.
class PrecisionGuard {
 public:
  explicit PrecisionGuard(unsigned bits);
  ~PrecisionGuard();
  PrecisionGuard(const PrecisionGuard&) = delete;
  PrecisionGuard& operator=(const PrecisionGuard&) = delete;

 private:
  unsigned old_digits10_;
};

// Layouts as in Tensors64 / Result64 (oracle.hpp): dense, varlen packed or paged, compact.
struct TensorsMP {
  std::vector<mp> q;    // shape_q
  std::vector<mp> k;    // shape_kv
  std::vector<mp> v;    // shape_v
  std::vector<mp> d_o;  // shape_o; empty: forward only
  SeqData seq = {};     // the variants' data (slopes are fp32 values, exact in double and in mp)
};

struct ResultMP {
  std::vector<mp> o;    // shape_o
  std::vector<mp> lse;  // shape_lse
  std::vector<mp> d_q;  // shape_q   } only when d_o is given
  std::vector<mp> d_k;  // shape_kv  }
  std::vector<mp> d_v;  // shape_v   }
};

// Textbook attention at the current default precision (call inside a PrecisionGuard).
ResultMP exact_mp(const Problem& p, const TensorsMP& in);

std::vector<mp> to_mp(const std::vector<double>& x);
std::vector<double> to_double(const std::vector<mp>& x);  // round to nearest

}  // namespace fc::ref::detail
