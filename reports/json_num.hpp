// Numbers in flashcheck's JSON reports. JSON has no NaN or infinity: they are the strings "nan",
// "inf", "-inf". Measured values are kept to 6 significant digits: a report must be byte-identical
// across machines, and the last bits of an error can differ with the libm (glibc picks exp/log
// implementations by CPU) while 6 digits do not, short of a value on a rounding boundary.
#pragma once

#include <nlohmann/json.hpp>

namespace fc::report {

// x rounded to 6 significant digits (an exact decimal print/parse), as JSON.
nlohmann::json num(double x);
// An exact value (a count, a parameter) as JSON, non-finite values as strings.
nlohmann::json exact(double x);
// The inverse of num/exact: a JSON number or one of the three strings; anything else throws
// std::invalid_argument naming `what`.
double to_double(const nlohmann::json& j, const char* what);
// x rounded to 6 significant digits.
double sig6(double x);

}  // namespace fc::report
