// Strict decimal numbers, for every number a user writes: metadata values, regression-case fields
// and command-line flags. Only plain decimal spellings are accepted — no hexadecimal, no octal
// leading zero ("010" is not 8, nor 10: it is refused), no "inf"/"nan", no doubled sign ("+-1"),
// no surrounding junk or spaces — so that a value means what it says or is refused.
#pragma once

#include <cstdint>
#include <string_view>

namespace fc::io {

// [+-]? (digits [. digits*] | . digits) ([eE] [+-]? digits)?, finite in double.
bool parse_decimal(std::string_view s, double* out);

// digits, no sign, no leading zero (but "0" itself), fitting in uint64_t.
bool parse_decimal_u64(std::string_view s, uint64_t* out);

// [-]? then as parse_decimal_u64, fitting in int64_t.
bool parse_decimal_i64(std::string_view s, int64_t* out);

}  // namespace fc::io
