#include "reports/json_num.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

namespace fc::report {

namespace {
nlohmann::json nonfinite(double x) { return x != x ? "nan" : (x > 0 ? "inf" : "-inf"); }
}  // namespace

double sig6(double x) {
  if (!std::isfinite(x) || x == 0) return x;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.5e", x);  // glibc prints the correctly rounded decimal
  return std::strtod(buf, nullptr);
}

nlohmann::json num(double x) { return std::isfinite(x) ? nlohmann::json(sig6(x)) : nonfinite(x); }

nlohmann::json exact(double x) { return std::isfinite(x) ? nlohmann::json(x) : nonfinite(x); }

double to_double(const nlohmann::json& j, const char* what) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  throw std::invalid_argument(std::string(what) + " is not a number");
}

}  // namespace fc::report
