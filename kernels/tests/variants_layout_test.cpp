// The CPU kernels on the layouts and masks of contract v2, bit for bit (both kernels are
// deterministic): a varlen or paged batch equals its sequences run one by one; paged K/V equals the
// same keys contiguous for every page size; the same data in any strides gives the same bits; a
// window (n_k, 0) is the causal mask of the same alignment and (n_k, n_k) no mask; a key outside a
// row's window never influences it; ALiBi with zero slopes is no ALiBi; zero-length sequences
// produce nothing and disturb nothing. And the registry never sends a variant to a kernel that does
// not declare it.
#include "tests/catch.hpp"
#include <bit>
#include <cmath>

#include "kernels/tests/test_util.hpp"
#include "kernels/tests/variant_inputs.hpp"

namespace {

using namespace fc;

bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }
// Two tensors hold the same bits (a bool, so that a failure does not print every byte).
bool same(const HostTensor& a, const HostTensor& b) { return a.shape == b.shape && a.bytes == b.bytes; }

// Every CPU kernel in a few configs (tiles that split the sequences unevenly, both loop orders).
std::vector<std::pair<const Kernel*, Config>> subjects() {
  std::vector<std::pair<const Kernel*, Config>> s = {{find_kernel("cpu_naive"), Config{}}};
  for (auto [bm, bn, order] : {std::tuple{64, 64, LoopOrder::FA2}, std::tuple{2, 3, LoopOrder::FA2},
                               std::tuple{3, 2, LoopOrder::FA1}, std::tuple{1, 1, LoopOrder::FA1}})
    s.push_back({find_kernel("cpu_tiled"), test::tile_config(bm, bn, order)});
  return s;
}

// Sequence b's rows of a batch run against the dense run of that sequence (o, lse, d_q; d_k, d_v
// too when `keys` — every key row read by this sequence alone).
void require_sequence_matches(const Inputs& in, const Outputs& all, int64_t b, const Outputs& one, bool keys) {
  const Problem& p = in.p;
  const int64_t n_q = test::seq_len(in.cu_seqlens_q, b), n_k = test::seq_len(in.cu_seqlens_k, b);
  const int64_t d = p.d, dv = head_dim_v(p);
  for (int64_t h = 0; h < p.heads_q; ++h)
    for (int64_t i = 0; i < n_q; ++i) {
      INFO("sequence " << b << " head " << h << " row " << i);
      REQUIRE(same_bits(all.lse.get(test::lse_at(in, b, h, i)), one.lse.get(h * n_q + i)));
      for (int64_t c = 0; c < dv; ++c)
        REQUIRE(same_bits(all.o.get(test::q_at(in, b, h, i, c, dv)), one.o.get((h * n_q + i) * dv + c)));
      for (int64_t c = 0; c < d; ++c)
        REQUIRE(same_bits(all.d_q.get(test::q_at(in, b, h, i, c, d)), one.d_q.get((h * n_q + i) * d + c)));
    }
  for (int64_t h = 0; keys && h < p.heads_kv; ++h)
    for (int64_t j = 0; j < n_k; ++j) {
      INFO("sequence " << b << " kv head " << h << " key " << j);
      for (int64_t c = 0; c < d; ++c)
        REQUIRE(same_bits(all.d_k.get(test::kv_at(in, b, h, j, c, d)), one.d_k.get((h * n_k + j) * d + c)));
      for (int64_t c = 0; c < dv; ++c)
        REQUIRE(same_bits(all.d_v.get(test::kv_at(in, b, h, j, c, dv)), one.d_v.get((h * n_k + j) * dv + c)));
    }
}

}  // namespace

TEST_CASE("a varlen or paged batch equals its sequences run one by one, bitwise", "[cpu]") {
  const std::vector<test::VariantSpec> specs = {
      {.mask = Mask::CausalBottomRight, .len_q = {3, 0, 17, 2, 1}, .len_k = {4, 2, 9, 0, 20}},
      {.heads_q = 4,
       .heads_kv = 2,
       .d_v = 3,
       .mask = Mask::CausalTopLeft,
       .len_q = {6, 9},
       .len_k = {11, 5},
       .page_size = 4,
       .window_left = 2,
       .window_right = 3,
       .softcap = 2,
       .slopes = {0.25, 0.5, 0.125, 1.0}},
      {.mask = Mask::None, .len_q = {0, 2, 0, 0, 1}, .len_k = {1, 0, 0, 3, 2}},  // total tokens < batch
      // Padded varlen (contract v3): 5 padding tokens before every sequence and after the last.
      {.mask = Mask::CausalBottomRight, .len_q = {3, 0, 17, 2, 1}, .len_k = {4, 2, 9, 0, 20}, .pad = 5},
  };
  for (DType t : {DType::F16, DType::BF16, DType::F32})
    for (test::VariantSpec s : specs) {
      s.dtype = t;
      const Inputs in = test::make_variant(s);
      REQUIRE(validate(in).empty());
      for (auto [kern, cfg] : subjects()) {
        INFO(kern->info.name << " " << cfg.block_m << "x" << cfg.block_n << " " << dtype_name(t));
        const Outputs all = test::run(*kern, in, cfg);
        for (int64_t b = 0; b < in.p.batch; ++b) {
          const int64_t n_q = test::seq_len(in.cu_seqlens_q, b), n_k = test::seq_len(in.cu_seqlens_k, b);
          if (n_q == 0) {  // no query: nothing produced; its keys' gradients are exactly 0
            for (int64_t h = 0; h < in.p.heads_kv; ++h)
              for (int64_t j = 0; j < n_k; ++j)
                for (int64_t c = 0; c < in.p.d; ++c) CHECK(all.d_k.get(test::kv_at(in, b, h, j, c, in.p.d)) == 0.0);
            continue;
          }
          if (n_k == 0) {  // no key: o = 0, lse = -inf, d_q = 0 exactly
            for (int64_t h = 0; h < in.p.heads_q; ++h)
              for (int64_t i = 0; i < n_q; ++i) {
                CHECK(all.lse.get(test::lse_at(in, b, h, i)) == -INFINITY);
                for (int64_t c = 0; c < head_dim_v(in.p); ++c)
                  CHECK(same_bits(all.o.get(test::q_at(in, b, h, i, c, head_dim_v(in.p))), 0.0));
                for (int64_t c = 0; c < in.p.d; ++c)
                  CHECK(same_bits(all.d_q.get(test::q_at(in, b, h, i, c, in.p.d)), 0.0));
              }
            continue;
          }
          require_sequence_matches(in, all, b, test::run(*kern, test::sequence_of(in, b), cfg), true);
        }
      }
    }
}

TEST_CASE("paged K/V gives the bits of the same keys contiguous, for every page size", "[cpu]") {
  for (int32_t page_size : {1, 3, 16, 128, 256})
    for (bool repeat : {false, true}) {
      test::VariantSpec s{.dtype = DType::BF16,
                          .mask = Mask::CausalBottomRight,
                          .len_q = {5, 40, 0, 7},
                          .len_k = {9, 300, 4, 130},
                          .page_size = page_size,
                          .repeat_pages = repeat};
      const Inputs paged = test::make_variant(s);
      REQUIRE(validate(paged).empty());
      const Inputs flat = test::unpaged(paged);
      for (auto [kern, cfg] : {subjects()[0], subjects()[1], subjects()[2]}) {
        INFO(kern->info.name << " page size " << page_size << (repeat ? " with a repeated page" : ""));
        const Outputs a = test::run(*kern, paged, cfg), b = test::run(*kern, flat, cfg);
        CHECK(same(a.o, b.o));
        CHECK(same(a.lse, b.lse));
        CHECK(same(a.d_q, b.d_q));
        if (repeat) continue;  // a shared page's gradient is the sum of its keys' (the oracle tests check it)
        std::vector<char> read(size_t(paged.k.numel()), 0);  // (k elements) a sequence's key
        for (int64_t q = 0; q < paged.p.batch; ++q)
          for (int64_t j = 0; j < test::seq_len(paged.cu_seqlens_k, q); ++j)
            for (int64_t c = 0; c < paged.p.d; ++c) {
              const int64_t x = test::kv_at(paged, q, 0, j, c, paged.p.d), y = test::kv_at(flat, q, 0, j, c, flat.p.d);
              read[size_t(x)] = 1;
              REQUIRE(same_bits(a.d_k.get(x), b.d_k.get(y)));
              REQUIRE(same_bits(a.d_v.get(x), b.d_v.get(y)));
            }
        for (size_t x = 0; x < read.size(); ++x)
          if (!read[x]) REQUIRE(same_bits(a.d_k.get(int64_t(x)), 0.0));  // slots and pages no sequence reads
      }
    }
}

TEST_CASE("the same data in any strides gives the same bits, inputs and outputs", "[cpu]") {
  for (bool varlen : {false, true}) {
    test::VariantSpec s{.dtype = DType::F16, .heads_q = 2, .heads_kv = 2, .mask = Mask::CausalTopLeft};
    if (varlen) s.len_q = {3, 5}, s.len_k = {6, 2};
    const Inputs in = test::make_variant(s);
    Inputs strided = in;
    const Problem& p = in.p;
    if (!varlen) {  // q, d_o as a BSHD buffer; k, v with padding after every row and head
      const int64_t H = p.heads_q, n = p.n_q, d = p.d, nk = p.n_k;
      strided.q = in.q.restrided({n * H * d, d, H * d, 1}, 0, in.q.numel());
      strided.d_o = in.d_o.restrided({n * H * d, d, H * d, 1}, 0, in.d_o.numel());
      strided.k = in.k.restrided({H * nk * (d + 3) + 5, nk * (d + 3) + 5, d + 3, 1}, 2, 2 + (H * nk * (d + 3) + 5));
      strided.v = in.v.restrided({H * nk * (d + 3) + 5, nk * (d + 3) + 5, d + 3, 1}, 2, 2 + (H * nk * (d + 3) + 5));
    } else {  // heads in reverse order (a negative stride), columns two apart
      const int64_t H = p.heads_q, d = p.d;
      strided.q = in.q.restrided({H * 2 * d, -2 * d, 2}, (H - 1) * 2 * d, p.total_q * H * 2 * d);
      strided.k = in.k.restrided({H * 2 * d, -2 * d, 2}, (H - 1) * 2 * d, p.total_k * H * 2 * d);
      strided.v = in.v.restrided({H * 2 * d, -2 * d, 2}, (H - 1) * 2 * d, p.total_k * H * 2 * d);
    }
    REQUIRE(validate(strided).empty());
    REQUIRE(strided.strided());
    for (auto [kern, cfg] : subjects()) {
      INFO(kern->info.name << (varlen ? " varlen" : " dense"));
      REQUIRE(claims(*kern, strided));
      const Outputs a = test::run(*kern, in, cfg);
      Outputs b = alloc_outputs(strided, true);
      // o as a strided view too: two elements of padding after every row.
      const std::vector<int64_t> shape = b.o.shape;
      std::vector<int64_t> st(shape.size());
      int64_t step = 1;
      for (size_t a2 = shape.size(); a2-- > 0;) st[a2] = step, step *= shape[a2] + (a2 + 1 == shape.size() ? 2 : 0);
      b.o = b.o.restrided(st, 0, step);
      kern->forward(strided, cfg, b);
      kern->backward(strided, cfg, b);
      CHECK(same(b.o.contiguous(), a.o));
      CHECK(same(b.lse, a.lse));
      CHECK(same(b.d_q, a.d_q));
      CHECK(same(b.d_k, a.d_k));
      CHECK(same(b.d_v, a.d_v));
    }
  }
}

// With n = max(n_q, n_k), (n, 0) and (n, n) reach every key the mask allows from every aligned row
// (i' runs over [n_k - n_q, n_k - 1] bottom-right, [0, n_q - 1] top-left); (n_k, .) alone falls
// short when n_q > n_k + 1.
TEST_CASE("window (n, 0) is the causal mask of the same alignment and (n, n) no mask, bitwise", "[cpu]") {
  for (Mask m : {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight})
    for (auto [n_q, n_k] : {std::pair{5, 9}, std::pair{9, 5}, std::pair{7, 7}}) {
      test::VariantSpec s{.dtype = DType::F16, .mask = m, .n_q = n_q, .n_k = n_k};
      const Inputs plain = test::make_variant(s);
      Inputs causal = plain, win = plain;
      causal.p.mask = m == Mask::CausalTopLeft ? Mask::CausalTopLeft : Mask::CausalBottomRight;
      win.p.window_left = std::max(n_q, n_k), win.p.window_right = 0;
      Inputs none = plain, wide = plain;
      none.p.mask = Mask::None;
      wide.p.mask = Mask::None, wide.p.window_left = wide.p.window_right = std::max(n_q, n_k);
      for (auto [kern, cfg] : subjects()) {
        INFO(kern->info.name << " " << mask_name(m) << " " << n_q << "x" << n_k);
        const Outputs a = test::run(*kern, win, cfg), b = test::run(*kern, causal, cfg);
        CHECK(same(a.o, b.o));
        CHECK(same(a.lse, b.lse));
        CHECK(same(a.d_k, b.d_k));
        const Outputs c = test::run(*kern, wide, cfg), e = test::run(*kern, none, cfg);
        CHECK(same(c.o, e.o));
        CHECK(same(c.d_q, e.d_q));
      }
    }
}

TEST_CASE("a key outside a row's window never influences the row, bitwise (NaN included)", "[cpu]") {
  test::VariantSpec s{.dtype = DType::F32,
                      .heads_q = 1,
                      .mask = Mask::None,
                      .n_q = 6,
                      .n_k = 11,
                      .window_left = 2,
                      .window_right = 1,
                      .softcap = 3,
                      .slopes = {0.5}};
  const Inputs clean = test::make_variant(s);
  for (auto [kern, cfg] : subjects()) {
    const Outputs base = test::run(*kern, clean, cfg);
    for (int64_t j = 0; j < s.n_k; ++j) {
      Inputs poisoned = clean;
      for (int64_t c = 0; c < s.d; ++c) poisoned.k.set(j * s.d + c, NAN), poisoned.v.set(j * s.d + c, NAN);
      const Outputs out = test::run(*kern, poisoned, cfg);
      for (int64_t i = 0; i < s.n_q; ++i) {
        if (visible(clean.p, i, j, s.n_q, s.n_k)) continue;
        INFO(kern->info.name << " key " << j << " row " << i);
        CHECK(same_bits(out.lse.get(i), base.lse.get(i)));
        for (int64_t c = 0; c < s.d; ++c) {
          CHECK(same_bits(out.o.get(i * s.d + c), base.o.get(i * s.d + c)));
          CHECK(same_bits(out.d_q.get(i * s.d + c), base.d_q.get(i * s.d + c)));
        }
      }
    }
  }
}

TEST_CASE("ALiBi with zero slopes is no ALiBi, bitwise", "[cpu]") {
  test::VariantSpec s{.dtype = DType::BF16,
                      .heads_q = 2,
                      .mask = Mask::CausalBottomRight,
                      .len_q = {4, 6},
                      .len_k = {7, 3},
                      .window_left = 3};
  const Inputs plain = test::make_variant(s);
  Inputs zero = plain;
  zero.p.alibi = true;
  zero.alibi_slopes = HostTensor(DType::F32, {2});
  for (auto [kern, cfg] : subjects()) {
    INFO(kern->info.name);
    const Outputs a = test::run(*kern, plain, cfg), b = test::run(*kern, zero, cfg);
    CHECK(same(a.o, b.o));
    CHECK(same(a.lse, b.lse));
    CHECK(same(a.d_q, b.d_q));
    CHECK(same(a.d_k, b.d_k));
  }
}

TEST_CASE("zero-length sequences produce nothing and disturb nothing", "[cpu]") {
  test::VariantSpec two{.dtype = DType::F16, .mask = Mask::CausalBottomRight, .len_q = {5, 3}, .len_k = {4, 8}};
  test::VariantSpec padded = two;
  padded.len_q = {0, 5, 0, 3, 2}, padded.len_k = {3, 4, 0, 8, 0};
  const Inputs a_in = test::make_variant(two);
  Inputs b_in = test::make_variant(padded);
  // b's sequences 1 and 3 carry a's sequences 0 and 1, bit for bit.
  for (auto [from, to] : {std::pair{0, 1}, std::pair{1, 3}}) {
    const Inputs a_seq = test::sequence_of(a_in, from);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < a_seq.p.n_q; ++i)
        for (int64_t c = 0; c < 4; ++c) {
          b_in.q.set(test::q_at(b_in, to, h, i, c, 4), a_seq.q.get((h * a_seq.p.n_q + i) * 4 + c));
          b_in.d_o.set(test::q_at(b_in, to, h, i, c, 4), a_seq.d_o.get((h * a_seq.p.n_q + i) * 4 + c));
        }
    for (int64_t j = 0; j < a_seq.p.n_k; ++j)
      for (int64_t c = 0; c < 4; ++c) {
        b_in.k.set(test::kv_at(b_in, to, 0, j, c, 4), a_seq.k.get(j * 4 + c));
        b_in.v.set(test::kv_at(b_in, to, 0, j, c, 4), a_seq.v.get(j * 4 + c));
      }
  }
  for (auto [kern, cfg] : subjects()) {
    INFO(kern->info.name);
    const Outputs a = test::run(*kern, a_in, cfg), b = test::run(*kern, b_in, cfg);
    for (auto [from, to] : {std::pair{0, 1}, std::pair{1, 3}})
      require_sequence_matches(b_in, b, to, test::run(*kern, test::sequence_of(a_in, from), cfg), true);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 2; ++i) CHECK(b.lse.get(test::lse_at(b_in, 4, h, i)) == -INFINITY);  // no key
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t c = 0; c < 4; ++c) CHECK(same_bits(b.d_k.get(test::kv_at(b_in, 0, 0, j, c, 4)), 0.0));  // no query
    CHECK(a.o.numel() == b.o.numel() - 2 * 2 * 4);  // the only new rows are the keyless sequence's
  }
}

TEST_CASE("a problem a kernel does not declare is never sent to it", "[cpu]") {
  const test::VariantSpec specs[] = {
      {.len_q = {2, 3}, .len_k = {3, 1}},
      {.len_q = {2, 3}, .len_k = {3, 1}, .page_size = 2},
      {.window_left = 1},
      {.softcap = 2},
      {.heads_q = 2, .slopes = {0.5, 0.25}},
      {.d_v = 3},
  };
  for (const Kernel& k : registry()) {
    INFO(k.info.name);
    for (const test::VariantSpec& s : specs) {
      const Inputs in = test::make_variant(s);
      const bool declared = covers(k.info.variants, variants_of(in));
      if (k.info.device == "cuda") CHECK_FALSE(declared);  // the CUDA kernels are dense only
      if (k.info.name == "cpu_naive" || k.info.name == "cpu_tiled") CHECK(declared);
      if (declared) continue;
      CHECK_FALSE(claims(k, in.p));
      CHECK_THROWS_AS(run_forward(k, in), std::invalid_argument);
    }
  }
}

TEST_CASE("a softcap outside fp32's normal range is refused (kernels keep c in fp32)", "[cpu]") {
  test::VariantSpec s{.mask = Mask::None, .len_q = {3}, .len_k = {4}, .softcap = 2};
  Inputs in = test::make_variant(s);
  REQUIRE(validate(in).empty());
  for (double c : {1e-50, 0x1p-127, 1e39}) {
    CAPTURE(c);
    in.p.softcap = c;
    CHECK(validate(in).find("fp32's normal range") != std::string::npos);
  }
  for (double c : {0x1p-126, 0x1.fffffep127}) {
    CAPTURE(c);
    in.p.softcap = c;
    CHECK(validate(in).empty());
  }
}
