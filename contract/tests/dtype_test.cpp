// The dtype table's derived lists: the reading order of messages, the sweep's dtypes and order, the
// kernel floats and the ABI's floats, each against a list written out by hand.
#include "tests/catch.hpp"

#include <vector>

#include "contract/attention.h"

using fc::DType;

TEST_CASE("the dtype table's lists keep the sweep's order and select what they name", "[cpu]") {
  using V = std::vector<DType>;
  CHECK(fc::sweep_dtypes() == V{DType::F16, DType::BF16, DType::F32});
  CHECK(fc::kernel_floats() == V{DType::F32, DType::F16, DType::BF16});  // the table's order
  CHECK(fc::dtypes_in_order(fc::abi_float) == V{DType::F16, DType::BF16, DType::F32, DType::F64});
  CHECK(fc::dtypes_in_order([](DType) { return true; }) ==
        V{DType::F16, DType::BF16, DType::F32, DType::F64, DType::I32, DType::BOOL});
  CHECK(fc::dtypes_in_order([](DType) { return false; }).empty());
  CHECK_FALSE(fc::kernel_float(DType::F64));
  CHECK_FALSE(fc::kernel_float(DType::BOOL));
  CHECK_FALSE(fc::abi_float(DType::I32));
  CHECK_FALSE(fc::kernel_float(fc::kDtypeAsQ));  // no row: not a dtype
  CHECK_FALSE(fc::abi_float(fc::kDtypeAsQ));
}

TEST_CASE("dtype_names joins a list for a message", "[cpu]") {
  CHECK(fc::dtype_names(fc::is_float) == "F16, BF16, F32 or F64");
  CHECK(fc::dtype_names(fc::kernel_float) == "F16, BF16 or F32");
  CHECK(fc::dtype_names([](DType t) { return t == DType::BOOL; }) == "BOOL");
  CHECK(fc::dtype_names([](DType t) { return t == DType::BF16 || t == DType::I32; }) == "BF16 or I32");
  CHECK(fc::dtype_names([](DType) { return false; }).empty());
}
