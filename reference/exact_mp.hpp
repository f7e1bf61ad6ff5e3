// The exact oracle's multiprecision core, exposed for tests that must stay in multiprecision
// (finite differences, precision comparisons). Everything here works at the precision set by a
// PrecisionGuard; values are boost::multiprecision::mpfr_float (MPFR backend).
#pragma once

#include <boost/multiprecision/mpfr.hpp>
#include <vector>

#include "kernels/attention.h"

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

struct TensorsMP {
  std::vector<mp> q;    // (batch, heads_q, n_q, d)
  std::vector<mp> k;    // (batch, heads_kv, n_k, d)
  std::vector<mp> v;    // (batch, heads_kv, n_k, d)
  std::vector<mp> d_o;  // (batch, heads_q, n_q, d); empty: forward only
};

struct ResultMP {
  std::vector<mp> o;    // (batch, heads_q, n_q, d)
  std::vector<mp> lse;  // (batch, heads_q, n_q)
  std::vector<mp> d_q;  // (batch, heads_q, n_q, d)   } only when d_o is given
  std::vector<mp> d_k;  // (batch, heads_kv, n_k, d)  }
  std::vector<mp> d_v;  // (batch, heads_kv, n_k, d)  }
};

// Textbook attention at the current default precision (call inside a PrecisionGuard).
ResultMP exact_mp(const Problem& p, const TensorsMP& in);

std::vector<mp> to_mp(const std::vector<double>& x);
std::vector<double> to_double(const std::vector<mp>& x);  // round to nearest

}  // namespace fc::ref::detail
