// Variant input files (contract v2): every good variant file reads back as the same problem and
// bits, and every malformed variant file raises the one FileError it should, on one line.
#include "tests/catch.hpp"

#include "io/tests/variant_files.hpp"

using namespace fc;

TEST_CASE("variant input files round-trip: problem, tensors and per-sequence data", "[cpu]") {
  for (const io::testing::GoodVariant& g : io::testing::good_variants()) {
    CAPTURE(g.label);
    REQUIRE(validate(g.in).empty());
    const io::TensorFile file = io::parse_safetensors(g.label, io::serialize_safetensors(io::inputs_file(g.in)));
    const Inputs back = io::inputs_from(g.label, file);
    const Problem &a = g.in.p, &b = back.p;
    CHECK(std::tie(a.batch, a.heads_q, a.heads_kv, a.n_q, a.n_k, a.d, a.d_v, a.window_left, a.window_right) ==
          std::tie(b.batch, b.heads_q, b.heads_kv, b.n_q, b.n_k, b.d, b.d_v, b.window_left, b.window_right));
    CHECK(std::tie(a.varlen, a.total_q, a.total_k, a.page_size, a.num_pages, a.pages_per_seq, a.alibi, a.sinks,
                   a.padded) == std::tie(b.varlen, b.total_q, b.total_k, b.page_size, b.num_pages, b.pages_per_seq,
                                         b.alibi, b.sinks, b.padded));
    CHECK((a.dtype == b.dtype && a.mask == b.mask && a.scale == b.scale && a.softcap == b.softcap));
    CHECK(std::tie(a.mask_kind, a.block_q, a.block_k, a.mask_b, a.mask_h, a.block_b, a.block_h) ==
          std::tie(b.mask_kind, b.block_q, b.block_k, b.mask_b, b.mask_h, b.block_b, b.block_h));
    CHECK((a.mask_kind != MaskKind::Additive || a.mask_dtype == b.mask_dtype));
    for (auto [x, y] :
         {std::pair{&g.in.q, &back.q}, std::pair{&g.in.k, &back.k}, std::pair{&g.in.v, &back.v},
          std::pair{&g.in.d_o, &back.d_o}, std::pair{&g.in.cu_seqlens_q, &back.cu_seqlens_q},
          std::pair{&g.in.cu_seqlens_k, &back.cu_seqlens_k}, std::pair{&g.in.page_table, &back.page_table},
          std::pair{&g.in.alibi_slopes, &back.alibi_slopes}, std::pair{&g.in.sinks, &back.sinks},
          std::pair{&g.in.cu_seqlens_q_padded, &back.cu_seqlens_q_padded},
          std::pair{&g.in.cu_seqlens_k_padded, &back.cu_seqlens_k_padded},
          std::pair{&g.in.mask, &back.mask}, std::pair{&g.in.block_mask, &back.block_mask}}) {
      CHECK(x->shape == y->shape);
      CHECK(x->bytes == y->bytes);
    }
  }
}

TEST_CASE("malformed variant files raise one typed error each, on one line, naming the problem", "[cpu]") {
  for (const io::testing::BadVariantCase& c : io::testing::malformed_variant_cases()) {
    CAPTURE(c.label);
    try {
      io::inputs_from(c.label, io::parse_safetensors(c.label, c.bytes));
      FAIL("accepted");
    } catch (const io::FileError& e) {
      CAPTURE(e.what());
      CHECK(e.fault == c.fault);
      CHECK(std::string(e.what()).find(c.mention) != std::string::npos);
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("validate refuses what the io reader refuses, for inputs built in code", "[cpu]") {
  Inputs in = io::testing::good_variants().at(2).in;  // paged
  REQUIRE(validate(in).empty());
  in.page_table.set(1, in.p.num_pages);
  CHECK(validate(in).find("is not a page") != std::string::npos);
  in = io::testing::good_variants().at(0).in;
  in.cu_seqlens_k.set(2, 3);  // 0, 4, 3, ...: decreasing
  CHECK(validate(in).find("decreases") != std::string::npos);
  in = io::testing::good_variants().at(0).in;
  in.q = in.q.restrided({8, 4, 1}, 0, in.q.numel());  // (total_q, 2, 4) as a strided view
  REQUIRE(validate(in).empty());
  in.q.bytes.resize(in.q.bytes.size() - 2);  // one element short of its storage
  CHECK(validate(in).find("outside its storage") != std::string::npos);
}
