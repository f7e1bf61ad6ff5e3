// Test helper: the exact sum of doubles (Shewchuk's non-overlapping partials), rounded at the end.
// Tests hold computed sums against it; the code under test never uses it.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace fc::testing {

inline double exact_sum(const std::vector<double>& x) {
  std::vector<double> parts;
  for (double v : x) {
    size_t n = 0;
    for (double p : parts) {
      const double hi = v + p, lo = std::fabs(v) < std::fabs(p) ? v - (hi - p) : p - (hi - v);
      if (lo != 0) parts[n++] = lo;
      v = hi;
    }
    parts.resize(n);
    parts.push_back(v);
  }
  double s = 0;
  for (double p : parts) s += p;
  return s;
}

}  // namespace fc::testing
