// Constants and γ_n shared by the property library's sources (which compile as few translation
// units: one definition each).
#pragma once

#include <limits>

namespace fc::props {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// γ_n = n u / (1 - n u) (Higham's bound on n roundings of unit roundoff u); +inf once n u >= 1.
inline double gamma(double n, double u) {
  const double nu = n * u;
  return nu < 1 ? nu / (1 - nu) : kInf;
}

}  // namespace fc::props
