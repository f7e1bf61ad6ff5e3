// The variants' generators (properties/variant_gen.hpp) reach each variant's edges — zero-length
// and length-1 sequences, fewer tokens than sequences, page sizes 1, 16, 128, 256 and non-powers of
// two, tables reversed, shuffled and with a shared page, windows of 0, of at least n and at tile
// edges, negative strides, padding, permuted axes, softcaps on both sides of the scores' range —
// and every input they build is valid and holds the values it was built from.
#include "tests/catch.hpp"

#include <random>
#include <numeric>
#include <set>

#include "properties/variant_gen.hpp"

namespace {

using namespace fc;
using namespace fc::props;

Inputs dense_case() {
  Inputs in;
  Problem& p = in.p;
  p.batch = 3, p.heads_q = 2, p.heads_kv = 1, p.n_q = 9, p.n_k = 13, p.d = 4, p.d_v = 3, p.dtype = DType::F16;
  p.scale = 0.5;
  std::mt19937_64 rng(7);
  auto fill = [&](std::vector<int64_t> shape) {
    HostTensor t(p.dtype, std::move(shape));
    for (int64_t x = 0; x < t.numel(); ++x) t.set(x, double(int(rng() % 64) - 32) / 8);
    return t;
  };
  in.q = fill(shape_q(p)), in.k = fill(shape_kv(p)), in.v = fill(shape_v(p)), in.d_o = fill(shape_o(p));
  return in;
}

bool is_pow2(int32_t x) { return x > 0 && (x & (x - 1)) == 0; }

}  // namespace

TEST_CASE("the variant generators reach every edge and build valid inputs", "[cpu]") {
  const Inputs dense = dense_case();
  std::set<int32_t> page_sizes;
  int zero_q = 0, zero_k = 0, one = 0, fewer_tokens = 0, reversed = 0, shuffled = 0, shared = 0;
  int win_zero = 0, win_wide = 0, win_edge = 0, negative = 0, padded = 0, permuted = 0, cap_below = 0, cap_above = 0;
  for (uint64_t seed = 0; seed < 1500; ++seed) {
    Rng rng(seed);
    const SeqLens lens = draw_lengths(rng, 3, 9, 13);
    for (size_t b = 0; b < lens.q.size(); ++b) {
      zero_q += lens.q[b] == 0, zero_k += lens.k[b] == 0, one += lens.q[b] == 1 || lens.k[b] == 1;
      REQUIRE(lens.src[b] >= 0);
      REQUIRE(lens.src[b] < 3);
    }
    const Inputs v = to_varlen(dense, lens);
    REQUIRE(validate(v).empty());
    fewer_tokens += v.p.total_q < v.p.batch;
    const int32_t ps = draw_page_size(rng);
    page_sizes.insert(ps);
    std::string how;
    const Inputs paged = to_paged(v, ps, true, rng, &how);
    REQUIRE(validate(paged).empty());
    reversed += how.find("reversed") != std::string::npos, shuffled += how.find("shuffled") != std::string::npos;
    const bool has_shared = how.find("shared") != std::string::npos;
    shared += has_shared;
    const Inputs flat = unpaged(paged);
    REQUIRE(validate(flat).empty());
    if (!has_shared) {  // the table maps every key back to its own values
      CHECK(flat.k.bytes == v.k.bytes);
      CHECK(flat.v.bytes == v.v.bytes);
    }
    int32_t left = 0, right = 0;
    draw_window(rng, 13, 4, &left, &right);
    REQUIRE((left >= 0 || right >= 0));
    win_zero += left == 0 || right == 0, win_wide += left >= 13 || right >= 13;
    win_edge += (left >= 3 && left <= 5) || (right >= 3 && right <= 5);
    std::string layout;
    const HostTensor s = draw_strided(v.q, rng, &layout);
    REQUIRE(s.strides_in_bounds());
    CHECK(s.contiguous().bytes == v.q.bytes);
    if (!s.is_compact()) {
      negative += layout.find("reversed") != std::string::npos;
      padded += int64_t(s.bytes.size()) > s.numel() * 2;
      permuted += s.strides.back() != 1 && s.strides.back() != 2 && s.strides.back() != -1 && s.strides.back() != -2;
    }
    const double c = draw_softcap(rng, 10);
    REQUIRE(c > 0);
    cap_below += c < 10 && c >= 5, cap_above += c > 10 && c <= 20;
  }
  CHECK(zero_q > 0);
  CHECK(zero_k > 0);
  CHECK(one > 0);
  CHECK(fewer_tokens > 0);
  for (int32_t ps : {1, 16, 128, 256}) CHECK(page_sizes.count(ps) == 1);
  CHECK(std::any_of(page_sizes.begin(), page_sizes.end(), [](int32_t x) { return !is_pow2(x); }));
  CHECK(reversed > 0);
  CHECK(shuffled > 0);
  CHECK(shared > 0);
  CHECK(win_zero > 0);
  CHECK(win_wide > 0);
  CHECK(win_edge > 0);
  CHECK(negative > 0);
  CHECK(padded > 0);
  CHECK(permuted > 0);
  CHECK(cap_below > 0);
  CHECK(cap_above > 0);
}

TEST_CASE("dense_sequence gives back the dense element a varlen sequence was cut from", "[cpu]") {
  const Inputs dense = dense_case();
  const SeqLens lens{.q = {4, 0, 9, 2}, .k = {13, 5, 1, 7}, .src = {2, 0, 1, 2}};
  const Inputs v = to_varlen(dense, lens);
  REQUIRE(validate(v).empty());
  for (int64_t b : {0, 2, 3}) {
    const Inputs one = dense_sequence(v, b);
    REQUIRE(validate(one).empty());
    const int64_t src = lens.src[size_t(b)];
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < lens.q[size_t(b)]; ++i)
        for (int64_t c = 0; c < 4; ++c)
          CHECK(one.q.get((h * one.p.n_q + i) * 4 + c) == dense.q.get(((src * 2 + h) * 9 + i) * 4 + c));
    for (int64_t j = 0; j < lens.k[size_t(b)]; ++j)
      for (int64_t c = 0; c < 3; ++c) CHECK(one.v.get(j * 3 + c) == dense.v.get((src * 13 + j) * 3 + c));
  }
}

TEST_CASE("the padded generator leads, pads 0 to 16 tokens, shifts a sequence and packs back", "[cpu]") {
  const Inputs dense = dense_case();
  int lead = 0, none_after = 0, sixteen = 0, empty_seq = 0, shifted_q = 0, with_tokens = 0;
  for (uint64_t seed = 0; seed < 600; ++seed) {
    Rng rng(seed);
    const SeqLens lens = draw_lengths(rng, 3, 9, 13);
    const Inputs v = to_varlen(dense, lens);
    const Padding pad = draw_padding(rng, lens);
    const Inputs padded = to_padded(v, pad, rng);
    INFO(describe(lens) << "; " << describe(pad));
    REQUIRE(validate(padded).empty());
    REQUIRE(padded.p.padded);
    CHECK(padded.p.total_q == v.p.total_q + pad.lead_q + std::accumulate(pad.q.begin(), pad.q.end(), 0));
    lead += pad.lead_q > 0 || pad.lead_k > 0;
    for (size_t b = 0; b < pad.q.size(); ++b) {
      REQUIRE(pad.q[b] >= 0);
      REQUIRE(pad.q[b] <= 16);
      none_after += pad.q[b] == 0, sixteen += pad.q[b] == 16 || pad.k[b] == 16;
      empty_seq += lens.q[b] == 0 || lens.k[b] == 0;
    }
    // Some sequence with queries starts away from its compact start (a kernel reading by cu_seqlens
    // misreads it), whenever some sequence has queries.
    const Seqs s = padded.seqs();
    bool moved = false, any = false;
    for (int64_t b = 0; b < padded.p.batch; ++b)
      if (seq_n_q(padded.p, s, b) > 0) any = true, moved |= s.pad_q[b] != s.cu_q[b];
    with_tokens += any, shifted_q += moved;
    const Inputs back = unpadded(padded);
    REQUIRE(validate(back).empty());
    CHECK(back.q.bytes == v.q.bytes);
    CHECK(back.k.bytes == v.k.bytes);
    CHECK(back.v.bytes == v.v.bytes);
    CHECK(back.d_o.bytes == v.d_o.bytes);
  }
  CHECK(lead > 0);
  CHECK(none_after > 0);
  CHECK(sixteen > 0);
  CHECK(empty_seq > 0);
  CHECK(shifted_q == with_tokens);
}

TEST_CASE("the long-paged draw reaches 512 pages, > 4096 keys, page indices >= 2^15 and tables past 2^16", "[cpu]") {
  Inputs like = dense_case();
  like.p.d_v = 0, like.v = like.k;  // d = d_v = 4
  int pages_512 = 0, past_4096 = 0, crossing_256 = 0, high = 0, wide = 0;
  for (uint64_t seed = 0; seed < 120; ++seed) {
    Rng rng(seed);
    std::string how;
    const Inputs in = to_long_paged(like, rng, &how);
    INFO(how);
    REQUIRE(validate(in).empty());
    const Problem& p = in.p;
    const Seqs s = in.seqs();
    const int64_t pages0 = (seq_n_k(p, s, 0) + p.page_size - 1) / p.page_size;
    CHECK(pages0 <= 512);
    CHECK(int64_t(p.n_q) * p.heads_q * (p.d + head_dim_v(p)) * p.n_k <= kLongPagedWork);
    pages_512 += pages0 == 512, past_4096 += p.n_k > 4096;
    crossing_256 += p.page_size == 256 && pages0 > 16;
    int32_t top = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t j = 0; j < seq_n_k(p, s, b); j += p.page_size)
        top = std::max(top, s.page_table[b * p.pages_per_seq + j / p.page_size]);
    high += top >= (1 << 15);
    wide += in.page_table.numel() > (1 << 16);
    // Read back through the table, the keys are a contiguous batch's.
    const Inputs flat = unpaged(in);
    REQUIRE(validate(flat).empty());
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t j = 0; j < seq_n_k(p, s, b); j += 97)
        CHECK(flat.k.get((int64_t(s.cu_k[b]) + j) * p.heads_kv * p.d) == in.k.get(kv_row(p, s, b, 0, j) * p.d));
  }
  CHECK(pages_512 > 0);
  CHECK(past_4096 > 0);
  CHECK(crossing_256 > 0);
  CHECK(high > 0);
  CHECK(wide > 0);
}

TEST_CASE("the long-paged draw at the GPU cap: wide heads keep long rows the CPU cap shortens", "[cpu]") {
  Inputs like = dense_case();
  like.p.heads_q = 4, like.p.heads_kv = 2, like.p.d = 128, like.p.d_v = 0;  // only p is read
  int64_t keys_cpu = 0, keys_gpu = 0;
  int past_4096 = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    std::string how_c, how_g;
    Rng rc(seed), rg(seed);
    const Inputs c = to_long_paged(like, rc, &how_c), g = to_long_paged(like, rg, &how_g, kLongPagedWorkGpu);
    INFO(how_g);
    REQUIRE(validate(g).empty());
    const Problem& p = g.p;
    const int64_t work = int64_t(p.n_q) * p.heads_q * (p.d + head_dim_v(p)) * p.n_k;
    CHECK(work <= kLongPagedWorkGpu);
    CHECK(int64_t(c.p.n_q) * c.p.heads_q * (c.p.d + head_dim_v(c.p)) * c.p.n_k <= kLongPagedWork);
    keys_cpu = std::max<int64_t>(keys_cpu, c.p.n_k), keys_gpu = std::max<int64_t>(keys_gpu, p.n_k);
    past_4096 += p.n_k > 4096;
  }
  // width 256, 4 heads, up to 4 queries: the CPU cap allows 2^21 / 1024 = 2048 keys at most.
  CHECK(keys_cpu <= 2048);
  CHECK(keys_gpu >= 8 * 2048 / 2);
  CHECK(past_4096 > 0);
}
