// The hostile harness's memory (kernels/hostile.hpp): poison() fills every stride gap and every
// unused page slot with NaN and nothing else; the correct kernels give the same bits on poisoned
// inputs; a kernel that reads a gap or a dead slot (the hostile mutants) is turned NaN.
#include "tests/catch.hpp"

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/hostile.hpp"
#include "kernels/mutants/variant_faulty.hpp"
#include "properties/variant_gen.hpp"
#include "verdict/verdict.hpp"

namespace {

using namespace fc;
using namespace fc::props;

Inputs dense_case(uint64_t seed) {
  Inputs in;
  Problem& p = in.p;
  p.batch = 3, p.heads_q = 2, p.heads_kv = 1, p.n_q = 9, p.n_k = 13, p.d = 4, p.dtype = DType::F32;
  p.scale = 0.5;
  std::mt19937_64 rng(seed);
  auto fill = [&](std::vector<int64_t> shape) {
    HostTensor t(p.dtype, std::move(shape));
    for (int64_t x = 0; x < t.numel(); ++x) t.set(x, double(int(rng() % 64) - 32) / 8);
    return t;
  };
  in.q = fill(shape_q(p)), in.k = fill(shape_kv(p)), in.v = fill(shape_v(p)), in.d_o = fill(shape_o(p));
  return in;
}

bool is_nan_bits(const HostTensor& t, int64_t storage_elem) {
  const int sz = dtype_size(t.dtype);
  for (int b = 0; b < sz; ++b)
    if (t.bytes[size_t(storage_elem * sz + b)] != 0xFF) return false;
  return true;
}

bool same_bits(const HostTensor& a, const HostTensor& b) {
  if (a.numel() != b.numel()) return false;
  const HostTensor x = a.contiguous(), y = b.contiguous();
  return x.bytes == y.bytes;
}

}  // namespace

TEST_CASE("poison fills a strided view's gaps with NaN and keeps its elements", "[cpu]") {
  Rng rng(3);
  int with_gaps = 0;
  for (int round = 0; round < 40; ++round) {
    Inputs in = dense_case(uint64_t(round));
    in.k = draw_strided(in.k, rng, nullptr);
    const std::vector<int64_t> gaps = unaddressed_elements(in.k);
    PoisonCount count;
    const Inputs out = poison(in, &count);
    CHECK(count.gaps == int64_t(gaps.size()));
    CHECK(has_poisonable(in) == !gaps.empty());
    with_gaps += !gaps.empty();
    for (int64_t at : gaps) CHECK(is_nan_bits(out.k, at));
    for (int64_t x = 0; x < in.k.numel(); ++x)
      CHECK(std::memcmp(&in.k.storage<float>()[in.k.storage_index(x)], &out.k.storage<float>()[out.k.storage_index(x)],
                        4) == 0);
    CHECK(out.q.bytes == in.q.bytes);  // compact: untouched
  }
  CHECK(with_gaps > 20);  // the generator pads most views
}

TEST_CASE("poison fills the page slots no sequence reads and keeps the ones it does", "[cpu]") {
  Rng rng(5);
  int spare = 0;
  for (int round = 0; round < 40; ++round) {
    const Inputs dense = dense_case(uint64_t(round));
    const Inputs varlen = to_varlen(dense, draw_lengths(rng, dense.p.batch, dense.p.n_q, dense.p.n_k));
    const Inputs paged = to_paged(varlen, draw_page_size(rng), round % 2 == 0, rng, nullptr);
    const std::vector<int32_t> reads = slot_reads(paged);
    PoisonCount count;
    const Inputs out = poison(paged, &count);
    const int64_t row = int64_t(paged.p.heads_kv) * paged.p.d;
    int64_t dead = 0;
    for (size_t slot = 0; slot < reads.size(); ++slot)
      for (int64_t x = 0; x < row; ++x) {
        const int64_t e = int64_t(slot) * row + x;
        if (reads[slot] == 0) {
          CHECK(std::isnan(out.k.get(e)));
          CHECK(std::isnan(out.v.get(e)));
        } else {
          CHECK(out.k.get(e) == paged.k.get(e));
          CHECK(out.v.get(e) == paged.v.get(e));
        }
      }
    for (int32_t r : reads) dead += r == 0;
    CHECK(count.page_slots == 2 * dead * row);
    spare += dead > 0;
    CHECK(out.q.bytes == paged.q.bytes);
  }
  CHECK(spare == 40);  // to_paged always keeps a spare page
}

TEST_CASE("poison fills padded varlen's padding tokens and keeps the sequences' tokens", "[cpu]") {
  Rng rng(7);
  int padding_rounds = 0;
  for (int round = 0; round < 30; ++round) {
    const Inputs dense = dense_case(uint64_t(round));
    const SeqLens lens = draw_lengths(rng, dense.p.batch, dense.p.n_q, dense.p.n_k);
    const Inputs padded = to_padded(to_varlen(dense, lens), draw_padding(rng, lens), rng);
    PoisonCount count;
    const Inputs out = poison(padded, &count);
    const Seqs s = padded.seqs();
    const Problem& p = padded.p;
    std::vector<char> live_q(size_t(p.total_q), 0), live_k(size_t(p.total_k), 0);
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t i = 0; i < seq_n_q(p, s, b); ++i) live_q[size_t(s.pad_q[b] + i)] = 1;
      for (int64_t j = 0; j < seq_n_k(p, s, b); ++j) live_k[size_t(s.pad_k[b] + j)] = 1;
    }
    int64_t dead_q = 0, dead_k = 0;
    for (int64_t t = 0; t < p.total_q; ++t)
      for (int64_t x = 0; x < p.heads_q * p.d; ++x) {
        const int64_t e = t * p.heads_q * p.d + x;
        CHECK(std::isnan(out.q.get(e)) == !live_q[size_t(t)]);
        if (live_q[size_t(t)]) CHECK(out.q.get(e) == padded.q.get(e));
        CHECK(std::isnan(out.d_o.get(e)) == !live_q[size_t(t)]);  // d_v = d here
      }
    for (int64_t t = 0; t < p.total_k; ++t)
      for (int64_t x = 0; x < p.heads_kv * p.d; ++x) {
        const int64_t e = t * p.heads_kv * p.d + x;
        CHECK(std::isnan(out.k.get(e)) == !live_k[size_t(t)]);
        CHECK(std::isnan(out.v.get(e)) == !live_k[size_t(t)]);
        if (live_k[size_t(t)]) CHECK(out.v.get(e) == padded.v.get(e));
      }
    for (char c : live_q) dead_q += !c;
    for (char c : live_k) dead_k += !c;
    CHECK(count.padding == 2 * dead_q * p.heads_q * p.d + 2 * dead_k * p.heads_kv * p.d);
    CHECK(has_poisonable(padded) == (dead_q + dead_k > 0));
    padding_rounds += dead_q + dead_k > 0;
  }
  CHECK(padding_rounds == 30);  // draw_padding always leaves padding before some sequence with tokens
}

TEST_CASE("output canaries: an untouched guard passes, each stray write is named", "[cpu]") {
  Problem p;
  p.batch = 1, p.heads_q = 2, p.heads_kv = 1, p.n_q = 3, p.n_k = 4, p.d = 2;
  p.varlen = true, p.total_q = 5, p.total_k = 4, p.padded = true;
  const HostTensor o = HostTensor::from_f64(DType::F32, shape_o(p), std::vector<double>(20, 0.5));
  const std::vector<bool> none;
  std::vector<bool> padding(20, false);
  for (int64_t x = 4; x < 8; ++x) padding[size_t(x)] = true;  // token 1 (heads 2 x d 2)
  auto name = [&](int64_t flat) { return verdict::element_name(p, "o", flat); };
  for (bool gaps : {false, true}) {
    INFO("gaps " << gaps);
    HostTensor g = guard_output(o, gaps, padding);
    REQUIRE(g.strides_in_bounds());
    CHECK(check_output_guard(g, "o", padding, name).empty());
    const HostTensor back = unguard_output(g, padding);
    for (int64_t x = 0; x < 20; ++x) CHECK(back.get(x) == (padding[size_t(x)] ? 0.0 : 0.5));
    auto stray = [&](int64_t storage_elem) {
      HostTensor w = g;
      w.storage<float>()[storage_elem] = 1.0f;
      return check_output_guard(w, "o", padding, name);
    };
    CHECK(stray(g.storage_index(0) - 1).find("1 element before the start of o") != std::string::npos);
    CHECK(stray(g.storage_index(19) + (gaps ? 2 : 1)).find("past the end of o") != std::string::npos);
    CHECK(stray(g.storage_index(19) + (gaps ? 2 : 1)).find("o[token=4,h=1,c=1]") != std::string::npos);
    CHECK(stray(g.storage_index(5)).find("o[token=1,h=0,c=1], an element on a padding token") != std::string::npos);
    if (gaps)
      CHECK(stray(g.storage_index(1) + 1).find("gap of o after its element o[token=0,h=0,c=1]") != std::string::npos);
    // Without the untouched set the padding tokens are elements like any other (a write there is allowed).
    CHECK(check_output_guard(g, "o", none, name).empty());
  }
  // Only guard_output's layout is checked: any other storage is refused, not passed.
  CHECK_THROWS_AS(check_output_guard(o, "o", none, name), std::invalid_argument);
  CHECK_THROWS_AS(unguard_output(o.laid_out({0, 1, 2}, 1, {0, 0, 1}, {}, 3), none), std::invalid_argument);
}

TEST_CASE("execute fails a built-in kernel that writes past o or into a gap of lse, naming the element", "[cpu]") {
  const Kernel& k = *find_kernel("mutant_writes_past_o");
  const Inputs in = dense_case(1);
  const verdict::Run r = verdict::execute(k, in, Config{}, false);
  CHECK(r.error.find("wrote outside its outputs: the kernel wrote past the end of o") != std::string::npos);
  CHECK(r.error.find("o[b=2,h=1,i=8,c=3]") != std::string::npos);
  // Unguarded (an allocation of o's size), the same kernel gives the right outputs.
  const Outputs plain = run_forward(k, in, Config{});
  CHECK(same_bits(plain.o, run_forward(*find_kernel("cpu_tiled"), in, Config{}).o));
  const verdict::Run clean = verdict::execute(*find_kernel("cpu_tiled"), in, Config{}, true);
  CHECK(clean.error.empty());
  // lse in a storage with a gap after every row (the kernel declares strides): the first gap written is named.
  const verdict::Run gap = verdict::execute(*find_kernel("mutant_writes_lse_gap"), in, Config{}, false);
  CHECK(gap.error.find("the kernel wrote into the gap of lse after its element lse[b=0,h=0,i=8]") != std::string::npos);
}

TEST_CASE("the correct CPU kernels give the same bits on poisoned inputs", "[cpu]") {
  Rng rng(11);
  for (const char* name : {"cpu_tiled", "cpu_naive"}) {
    const Kernel& k = *find_kernel(name);
    for (int round = 0; round < 12; ++round) {
      INFO(name << " round " << round);
      const Inputs dense = dense_case(uint64_t(round));
      Inputs in = to_varlen(dense, draw_lengths(rng, dense.p.batch, dense.p.n_q, dense.p.n_k));
      if (round % 2 == 0) in = to_paged(in, draw_page_size(rng), false, rng, nullptr);
      if (round % 4 == 1) {  // padded varlen: NaN on the padding tokens
        const SeqLens lens = draw_lengths(rng, dense.p.batch, dense.p.n_q, dense.p.n_k);
        in = to_padded(to_varlen(dense, lens), draw_padding(rng, lens), rng);
      }
      if (round % 3 == 0) in.q = draw_strided(in.q, rng, nullptr), in.v = draw_strided(in.v, rng, nullptr);
      if (!claims(k, in)) continue;
      const Inputs bad = poison(in);
      const Outputs a = run_forward(k, in, Config{}), b = run_forward(k, bad, Config{});
      CHECK(same_bits(a.o, b.o));
      CHECK(same_bits(a.lse, b.lse));
    }
  }
}

TEST_CASE("the gap and tail mutants are harmless on benign memory and NaN on poisoned memory", "[cpu]") {
  // What kills them is the poison: on the inputs as generated (gaps zero, spare slots finite) they give
  // the correct kernel's bits; on poison(inputs) some row turns NaN.
  using mutants::VariantFault;
  const Kernel clean = mutants::make_variant_faulty_kernel(VariantFault::None, "variant_faulty_none", "no fault");
  const Kernel gap = mutants::make_variant_faulty_kernel(VariantFault::StrideGapRead, "gap", "");
  const Kernel tail = mutants::make_variant_faulty_kernel(VariantFault::PageTailRead, "tail", "");
  auto any_nan = [](const HostTensor& t) {
    for (int64_t x = 0; x < t.numel(); ++x)
      if (std::isnan(t.get(x))) return true;
    return false;
  };
  Rng rng(17);
  int gap_nan = 0, tail_nan = 0;
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    const Inputs dense = dense_case(uint64_t(round));
    Inputs strided = dense;
    strided.k = draw_strided(dense.k, rng, nullptr), strided.v = draw_strided(dense.v, rng, nullptr);
    const Outputs want = run_forward(clean, strided, Config{});
    CHECK(same_bits(run_forward(gap, strided, Config{}).o, want.o));
    const Outputs bad = run_forward(gap, poison(strided), Config{});
    gap_nan += any_nan(bad.o) && !any_nan(want.o);
    const Inputs varlen = to_varlen(dense, draw_lengths(rng, dense.p.batch, dense.p.n_q, dense.p.n_k));
    const Inputs paged = to_paged(varlen, 5, false, rng, nullptr);  // page size 5: most lengths leave a tail
    const Outputs want_p = run_forward(clean, paged, Config{});
    CHECK(same_bits(run_forward(tail, paged, Config{}).o, want_p.o));
    tail_nan += any_nan(run_forward(tail, poison(paged), Config{}).o) && !any_nan(want_p.o);
  }
  CHECK(gap_nan >= 10);
  CHECK(tail_nan >= 10);
}
