// Variant input files for tests (contract v2, docs/SEMANTICS.md): good varlen, paged, windowed, softcapped,
// ALiBi and d_v != d inputs, and one bad file per malformed variant case, each with the FileError
// it must raise and a word its one-line message must contain. Shared by the io tests and the cli
// tests (io/tests/variant_io_test.cpp, cli/tests/variants_cli_test.cpp).
#pragma once

#include <string>
#include <vector>

#include "io/attention_io.hpp"

namespace fc::io::testing {

// Good inputs, F16 (F32 slopes, I32 offsets and tables), with d_o; labelled.
struct GoodVariant {
  std::string label;
  Inputs in;
};
std::vector<GoodVariant> good_variants();

struct BadVariantCase {
  std::string label;
  std::string bytes;  // the whole file
  FileFault fault;
  std::string mention;
};
std::vector<BadVariantCase> malformed_variant_cases();

}  // namespace fc::io::testing
