#include "io/numbers.hpp"

#include <charconv>
#include <cmath>

namespace fc::io {
namespace {

bool digit(char c) { return c >= '0' && c <= '9'; }

// Advances `i` over a run of digits; returns how many.
size_t digits(std::string_view s, size_t& i) {
  const size_t from = i;
  while (i < s.size() && digit(s[i])) ++i;
  return i - from;
}

}  // namespace

bool parse_decimal(std::string_view s, double* out) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t mantissa = digits(s, i);
  if (i < s.size() && s[i] == '.') {
    ++i;
    mantissa += digits(s, i);
  }
  if (mantissa == 0) return false;  // "", "+", ".", "-.", "+-1", "inf", "nan", "0x1p3"...
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits(s, i) == 0) return false;
  }
  if (i != s.size()) return false;
  // from_chars refuses a leading '+'; the grammar above has already been checked in full.
  const size_t from = s[0] == '+' ? 1 : 0;
  double x = 0;
  const auto [ptr, ec] = std::from_chars(s.data() + from, s.data() + s.size(), x, std::chars_format::general);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(x)) return false;
  *out = x;
  return true;
}

bool parse_decimal_u64(std::string_view s, uint64_t* out) {
  if (s.empty() || !digit(s[0])) return false;
  if (s[0] == '0' && s.size() > 1) return false;  // "010": octal to C, decimal to a person: refused
  uint64_t x = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), x, 10);
  if (ec != std::errc() || ptr != s.data() + s.size()) return false;  // junk or overflow
  *out = x;
  return true;
}

bool parse_decimal_i64(std::string_view s, int64_t* out) {
  const bool neg = !s.empty() && s[0] == '-';
  uint64_t m = 0;
  if (!parse_decimal_u64(s.substr(neg ? 1 : 0), &m)) return false;
  if (neg && m == 0) return false;  // "-0"
  if (m > uint64_t(INT64_MAX) + (neg ? 1 : 0)) return false;
  *out = neg ? int64_t(0 - m) : int64_t(m);
  return true;
}

}  // namespace fc::io
