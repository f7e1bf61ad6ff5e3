// cpu_naive, the same-precision baseline, runs its heads side by side (kernels/cpu/naive.cpp), and a
// lone head's rows and key blocks side by side (kernels/cpu/naive.hpp): its outputs are bitwise the
// same on 1 thread and on many, one head or several, dense, GQA, varlen and paged (pages shared
// between sequences: their d_k, d_v sums in the serial order) alike.
#include "tests/catch.hpp"
#include <cstdlib>

#include "kernels/tests/test_util.hpp"
#include "kernels/tests/variant_inputs.hpp"

namespace {

using namespace fc;

Outputs with_threads(const char* threads, const Inputs& in) {
  setenv("FC_THREADS", threads, 1);
  Outputs out = test::run(*find_kernel("cpu_naive"), in, Config{});
  unsetenv("FC_THREADS");
  return out;
}

}  // namespace

TEST_CASE("cpu_naive gives the same bits on 1 thread and on many", "[cpu]") {
  const std::vector<test::VariantSpec> specs = {
      // One (batch, kv head): its rows side by side, several row blocks of the backward (block 256
      // rows here) and key blocks of 1024 for the d_k, d_v sums; rows that see no key (n_q > n_k).
      {.heads_q = 1, .heads_kv = 1, .d = 16, .mask = Mask::CausalBottomRight, .batch = 1, .n_q = 600, .n_k = 2100},
      {.heads_q = 2,
       .heads_kv = 1,
       .d = 8,
       .d_v = 12,
       .mask = Mask::CausalBottomRight,
       .batch = 1,
       .n_q = 700,
       .n_k = 300},
      {.heads_q = 1, .heads_kv = 1, .d = 32, .mask = Mask::None, .batch = 1, .n_q = 70, .n_k = 40000},
      {.heads_q = 6, .heads_kv = 3, .d = 16, .mask = Mask::CausalBottomRight, .batch = 3, .n_q = 40, .n_k = 53},
      {.heads_q = 4, .heads_kv = 4, .d = 8, .d_v = 5, .mask = Mask::None, .batch = 2, .n_q = 33, .n_k = 17},
      {.heads_q = 4, .heads_kv = 2, .d = 8, .mask = Mask::CausalTopLeft, .len_q = {6, 19, 4}, .len_k = {11, 25, 9}},
      {.heads_q = 4,
       .heads_kv = 2,
       .d = 8,
       .mask = Mask::CausalBottomRight,
       .len_q = {5, 40, 7},
       .len_k = {9, 70, 13},
       .page_size = 4,
       .repeat_pages = true,
       .softcap = 3},
  };
  for (DType t : {DType::F16, DType::BF16, DType::F32})
    for (test::VariantSpec s : specs) {
      s.dtype = t;
      const Inputs in = test::make_variant(s);
      REQUIRE(validate(in).empty());
      INFO(dtype_name(t) << " heads " << s.heads_q << "/" << s.heads_kv << " paged " << s.page_size);
      const Outputs one = with_threads("1", in);
      for (const char* threads : {"2", "5", "16"}) {
        const Outputs many = with_threads(threads, in);
        INFO(threads << " threads");
        CHECK(one.o.bytes == many.o.bytes);
        CHECK(one.lse.bytes == many.lse.bytes);
        CHECK(one.d_q.bytes == many.d_q.bytes);
        CHECK(one.d_k.bytes == many.d_k.bytes);
        CHECK(one.d_v.bytes == many.d_v.bytes);
      }
    }
}
