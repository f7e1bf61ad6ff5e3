// Rows with no visible key follow the contract exactly (o = 0, lse = -inf, d_q = 0, never NaN),
// and keys a row cannot see never touch it (a NaN planted in them leaves the row's bits unchanged),
// for both CPU kernels, every storage dtype, several tile shapes and both loop orders.
#include "tests/catch.hpp"
#include <cmath>
#include <string>

#include "kernels/tests/test_util.hpp"

namespace {

using namespace fc;

std::vector<std::pair<const Kernel*, Config>> runs() {
  std::vector<std::pair<const Kernel*, Config>> out{{find_kernel("cpu_naive"), Config{}}};
  for (LoopOrder order : {LoopOrder::FA2, LoopOrder::FA1})
    for (auto [bm, bn] : {std::pair{1, 1}, {2, 3}, {4, 2}, {64, 64}})
      out.push_back({find_kernel("cpu_tiled"), test::tile_config(bm, bn, order)});
  return out;
}

std::string label(const Kernel& k, const Config& c, DType t) {
  return k.info.name + " " + std::to_string(c.block_m) + "x" + std::to_string(c.block_n) +
         (c.order == LoopOrder::FA1 ? " FA1 " : " FA2 ") + dtype_name(t);
}

}  // namespace

// Bottom-right alignment with n_q = 7 > n_k = 3: rows 0..3 see no key; rows 4..6 see 1..3 keys.
TEST_CASE("forward and backward of fully masked rows give o = 0, lse = -inf, d_q = 0", "[cpu]") {
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    const Problem p{.heads_q = 2,
                    .n_q = 7,
                    .n_k = 3,
                    .d = 4,
                    .dtype = t,
                    .mask = Mask::CausalBottomRight,
                    .scale = default_scale(4)};
    const Inputs in = test::random_inputs(p, 11);
    for (const auto& [kern, cfg] : runs()) {
      INFO(label(*kern, cfg, t));
      const Outputs out = test::run(*kern, in, cfg);
      int masked = 0, seen = 0;
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < p.n_q; ++i) {
          const bool empty = n_visible(p.mask, i, p.n_q, p.n_k) == 0;
          const double lse = out.lse.get(offset_lse(p, 0, h, i));
          int64_t zero_o = 0, zero_dq = 0, nan = std::isnan(lse);
          for (int64_t c = 0; c < p.d; ++c) {
            const int64_t at = offset_q(p, 0, h, i) + c;
            zero_o += out.o.get(at) == 0.0;
            zero_dq += out.d_q.get(at) == 0.0;
            nan += std::isnan(out.o.get(at)) + std::isnan(out.d_q.get(at));
          }
          CHECK(nan == 0);
          if (empty) {
            ++masked;
            CHECK(zero_o == p.d);
            CHECK(zero_dq == p.d);
            CHECK(lse == -test::kInf);
          } else {  // control: rows with keys are not zeroed, so the checks above are not vacuous
            ++seen;
            CHECK(std::isfinite(lse));
            CHECK(zero_o < p.d);
          }
        }
      CHECK(masked == 8);
      CHECK(seen == 6);
    }
  }
}

// Top-left mask: the last key (j = n_k - 1) is visible only to the last row. A NaN in its k and v
// may poison that row only; every other row's o, lse and d_q keep their bits.
TEST_CASE("forward and backward never read keys a row cannot see", "[cpu]") {
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    const Problem p{.n_q = 5, .n_k = 5, .d = 3, .dtype = t, .mask = Mask::CausalTopLeft, .scale = default_scale(3)};
    const Inputs clean = test::random_inputs(p, 23);
    Inputs dirty = clean;
    for (int64_t c = 0; c < p.d; ++c) {
      dirty.k.set(offset_kv(p, 0, 0, p.n_k - 1) + c, std::nan(""));
      dirty.v.set(offset_kv(p, 0, 0, p.n_k - 1) + c, std::nan(""));
    }
    for (const auto& [kern, cfg] : runs()) {
      INFO(label(*kern, cfg, t));
      const Outputs a = test::run(*kern, clean, cfg), b = test::run(*kern, dirty, cfg);
      const int64_t row_end = offset_q(p, 0, 0, p.n_q - 1);  // elements of rows 0 .. n_q-2
      for (int64_t e = 0; e < row_end; ++e) {
        CHECK(a.o.get(e) == b.o.get(e));
        CHECK(a.d_q.get(e) == b.d_q.get(e));
      }
      for (int64_t i = 0; i + 1 < p.n_q; ++i) CHECK(a.lse.get(i) == b.lse.get(i));
      CHECK(std::isnan(b.o.get(row_end)));  // control: the NaN does reach the row that sees it
    }
  }
}
