// dtype_table: prints the contract's dtype table (contract/attention.h, kDTypeTable) as JSON, one
// object per row in enum order, for scripts/dtype_table.py (which writes python/flashcheck/dtypes.py).
#include <cstdio>

#include "contract/attention.h"

int main() {
  std::printf("[\n");
  for (const fc::DTypeInfo& x : fc::kDTypeTable)
    std::printf(
        "  {\"name\": \"%s\", \"bytes\": %d, \"is_float\": %s, \"precision\": %d, \"min_exp\": %d, \"max_exp\": %d, "
        "\"max_finite\": %.17g, \"dl_code\": %d, \"dl_bits\": %d, \"abi\": %d, \"sweep\": %d}%s\n",
        x.name, x.bytes, x.is_float ? "true" : "false", x.precision, x.min_exp, x.max_exp, x.max_finite, int(x.dl_code),
        int(x.dl_bits), int(x.abi), int(x.sweep), &x == &fc::kDTypeTable[std::size(fc::kDTypeTable) - 1] ? "" : ",");
  std::printf("]\n");
  return 0;
}
