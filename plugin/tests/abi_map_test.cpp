// The ABI mapping (plugin/abi_map.hpp): layouts, the arena's packing and unpacking, and the
// detection of writes a kernel must not make (each detection also shown to fire).
#include "tests/catch.hpp"
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "plugin/abi_map.hpp"

using namespace fc;
using namespace fc::plugin;

namespace {

Problem problem(int32_t b, int32_t hq, int32_t hkv, int32_t nq, int32_t nk, int32_t d, DType t) {
  Problem p;
  p.batch = b, p.heads_q = hq, p.heads_kv = hkv, p.n_q = nq, p.n_k = nk, p.d = d, p.dtype = t;
  p.scale = default_scale(d);
  return p;
}

HostTensor iota(DType t, std::vector<int64_t> shape, double from) {
  HostTensor x(t, std::move(shape));
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, from + double(i % 97));
  return x;
}

// A "kernel" that writes o[b,h,i,c] = q[b,h,i,c] + 1 and lse = i through the DLTensors' strides.
void fake_forward(const CallPlan& plan, unsigned char* arena) {
  fc_forward_args a;
  make_args(plan, arena, {kDLCPU, 0}, &a, nullptr);
  const fc_problem& p = plan.problem;
  auto at = [](const DLTensor& t, std::initializer_list<int64_t> idx) {
    int64_t off = 0, stride = 1, k = t.ndim - 1;
    std::vector<int64_t> v(idx);
    for (; k >= 0; --k) off += v[size_t(k)] * (t.strides ? t.strides[k] : stride), stride *= t.shape[k];
    return off;
  };
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        static_cast<float*>(a.lse.data)[at(a.lse, {b, h, i})] = float(i);
        for (int64_t c = 0; c < p.d; ++c)
          static_cast<float*>(a.o.data)[at(a.o, {b, h, i, c})] =
              static_cast<float*>(a.q.data)[at(a.q, {b, h, i, c})] + 1;
      }
}

}  // namespace

TEST_CASE("abi_map: the problem maps field by field, a dense one with neutral variants", "[cpu]") {
  Problem p = problem(2, 4, 2, 5, 7, 16, DType::BF16);
  p.mask = Mask::CausalBottomRight, p.scale = 0.375;
  const fc_problem a = to_abi(p);
  CHECK(a.batch == 2);
  CHECK(a.heads_q == 4);
  CHECK(a.heads_kv == 2);
  CHECK(a.n_q == 5);
  CHECK(a.n_k == 7);
  CHECK(a.d == 16);
  CHECK(a.d_v == 16);
  CHECK(a.mask == FC_CAUSAL_BOTTOM_RIGHT);
  CHECK(a.window_left == -1);
  CHECK(a.window_right == -1);
  CHECK(a.scale == 0.375);
  CHECK(a.softcap == 0);
  const CallPlan plan = plan_call(p, Layout::Compact, false);
  CHECK(plan.slot[kQ].dtype.code == kDLBfloat);
  CHECK(plan.slot[kLse].dtype.code == kDLFloat);
  CHECK(plan.slot[kLse].dtype.bits == 32);
  CHECK(plan.slot[kCuSeqlensQ].present == 0);
  CHECK(plan.slot[kDq].present == 0);  // forward only
}

TEST_CASE("abi_map: mixed layouts reach all three, compact stays compact, both deterministic", "[cpu]") {
  std::set<Layout> seen;
  for (int32_t n = 1; n < 40; ++n) {
    const Problem p = problem(1, 2, 1, n, n + 1, 8, DType::F32);
    seen.insert(layout_for(p, LayoutPolicy::Mixed));
    CHECK(layout_for(p, LayoutPolicy::Mixed) == layout_for(p, LayoutPolicy::Mixed));
    CHECK(layout_for(p, LayoutPolicy::Compact) == Layout::Compact);
  }
  CHECK(seen.size() == 3);
}

TEST_CASE("abi_map: every layout round-trips through a strided kernel, nothing stray", "[cpu]") {
  const Problem p = problem(2, 3, 1, 4, 5, 6, DType::F32);
  for (Layout layout : {Layout::Compact, Layout::Bshd, Layout::Padded}) {
    CAPTURE(layout_name(layout));
    const CallPlan plan = plan_call(p, layout, false);
    std::set<uint64_t> offsets;
    uint64_t end = 0;
    for (const ArenaSlot& s : plan.slot) {
      if (!s.present) continue;
      CHECK(s.offset % 256 == 0);
      CHECK(s.offset >= end);  // in order, never overlapping
      end = s.offset + s.span;
    }
    CHECK(end <= plan.bytes);
    const HostTensor q = iota(DType::F32, shape_q(p), 1), k = iota(DType::F32, shape_kv(p), 2),
                     v = iota(DType::F32, shape_kv(p), 3);
    std::vector<unsigned char> arena(plan.bytes), before;
    pack(plan, {&q, &k, &v}, arena.data());
    before = arena;
    fake_forward(plan, arena.data());
    HostTensor o(DType::F32, shape_q(p)), lse(DType::F32, shape_lse(p));
    HostOuts out;
    out.o = &o, out.lse = &lse;
    CHECK(unpack(plan, arena.data(), before.data(), out) == "");
    for (int64_t x = 0; x < o.numel(); ++x) REQUIRE(o.get(x) == q.get(x) + 1);
    for (int64_t x = 0; x < lse.numel(); ++x) REQUIRE(lse.get(x) == double(x % p.n_q));
  }
}

TEST_CASE("abi_map: a kernel that ignores strides reads NaN from the padding", "[cpu]") {
  const Problem p = problem(1, 1, 1, 3, 3, 4, DType::F16);
  const CallPlan plan = plan_call(p, Layout::Padded, false);
  const HostTensor q = iota(DType::F16, shape_q(p), 1), k = q, v = q;
  std::vector<unsigned char> arena(plan.bytes);
  pack(plan, {&q, &k, &v}, arena.data());
  // Element 4 read as if compact is row 1's first element; in the padded layout it is a gap.
  uint16_t gap;
  std::memcpy(&gap, arena.data() + plan.slot[kQ].offset + 4 * 2, 2);
  CHECK((gap & 0x7C00) == 0x7C00);
  CHECK((gap & 0x03FF) != 0);  // NaN
}

TEST_CASE("abi_map: stray writes are named (padding, past the end, into an input)", "[cpu]") {
  const Problem p = problem(1, 2, 2, 3, 3, 4, DType::F32);
  const CallPlan plan = plan_call(p, Layout::Padded, false);
  const HostTensor q = iota(DType::F32, shape_q(p), 1), k = q, v = q;
  std::vector<unsigned char> arena(plan.bytes), before;
  pack(plan, {&q, &k, &v}, arena.data());
  before = arena;
  HostTensor o(DType::F32, shape_q(p)), lse(DType::F32, shape_lse(p));
  HostOuts out;
  out.o = &o, out.lse = &lse;
  REQUIRE(unpack(plan, arena.data(), before.data(), out) == "");
  auto poke = [&](uint64_t at) {
    std::vector<unsigned char> a = before;
    a[at] ^= 1;
    return unpack(plan, a.data(), before.data(), out);
  };
  const ArenaSlot& so = plan.slot[kO];
  CHECK(poke(so.offset) == "");  // o's first element: an output
  CHECK(poke(so.offset + 4 * 4).find("gaps between the elements of o") != std::string::npos);  // after row 0
  CHECK(poke(so.offset + so.span).find("past the end of o") != std::string::npos);
  CHECK(poke(plan.slot[kK].offset).find("modified its input k") != std::string::npos);
  const ArenaSlot& sl = plan.slot[kLse];  // the last tensor: its guard, then alignment padding
  CHECK(poke(sl.offset + sl.span + 63).find("past the end of lse") != std::string::npos);
  CHECK(poke(plan.bytes - 1).find("outside every tensor") != std::string::npos);
  // The element is named: o is (1, 2, 3, 4), 24 elements; row 0 ends at element (0, 0, 0, 3).
  CHECK(poke(so.offset + so.span).find("its element 24 (1 past its last") != std::string::npos);
  CHECK(poke(so.offset + so.span + 4).find("its element 25 (2 past its last") != std::string::npos);
  CHECK(poke(so.offset - 1).find("1 byte before the start of o: its element -1") != std::string::npos);
  CHECK(poke(so.offset - 5).find("before the start of o: its element -2") != std::string::npos);
  CHECK(poke(so.offset + 4 * 4).find("1 byte after its element (0, 0, 0, 3)") != std::string::npos);
}

TEST_CASE("abi_map: the variants map to fields and tensors", "[cpu]") {
  Problem p = problem(3, 4, 2, 6, 9, 8, DType::F16);
  p.d_v = 4, p.window_left = 2, p.window_right = 0, p.softcap = 7.5, p.alibi = true;
  p.varlen = true, p.total_q = 10, p.total_k = 15;
  p.page_size = 4, p.num_pages = 6, p.pages_per_seq = 3;
  const fc_problem a = to_abi(p);
  CHECK(a.d_v == 4);
  CHECK(a.window_left == 2);
  CHECK(a.window_right == 0);
  CHECK(a.softcap == 7.5);
  for (Layout layout : {Layout::Compact, Layout::Bshd, Layout::Padded}) {
    CAPTURE(layout_name(layout));
    const CallPlan plan = plan_call(p, layout, true);
    auto shape = [&](int32_t id) {
      return std::vector<int64_t>(plan.slot[id].shape, plan.slot[id].shape + plan.slot[id].ndim);
    };
    CHECK(shape(kQ) == std::vector<int64_t>{10, 4, 8});    // (total_q, heads_q, d)
    CHECK(shape(kK) == std::vector<int64_t>{6, 4, 2, 8});  // (pages, page_size, heads_kv, d)
    CHECK(shape(kV) == std::vector<int64_t>{6, 4, 2, 4});  // d_v
    CHECK(shape(kO) == std::vector<int64_t>{10, 4, 4});    // (total_q, heads_q, d_v)
    CHECK(shape(kLse) == std::vector<int64_t>{4, 10});     // (heads_q, total_q)
    CHECK(shape(kCuSeqlensQ) == std::vector<int64_t>{4});  // batch + 1
    CHECK(shape(kCuSeqlensK) == std::vector<int64_t>{4});
    CHECK(shape(kPageTable) == std::vector<int64_t>{3, 3});  // (batch, pages_per_seq)
    CHECK(shape(kAlibi) == std::vector<int64_t>{4});         // heads_q
    CHECK(plan.slot[kCuSeqlensQ].dtype.code == kDLInt);
    CHECK(plan.slot[kCuSeqlensQ].has_strides == 0);
    CHECK(shape(kDk) == shape(kK));
    // Every element of every strided tensor at its own storage element (no two share one).
    for (int32_t id : {kQ, kK, kV, kO, kLse}) {
      const ArenaSlot& s = plan.slot[id];
      const bool strided = layout == Layout::Padded || (layout == Layout::Bshd && id != kLse);
      CHECK(s.has_strides == int32_t(strided));
      std::set<int64_t> at;
      int64_t n = 1;
      for (int i = 0; i < s.ndim; ++i) n *= s.shape[i];
      for (int64_t x = 0; x < n; ++x) {
        int64_t rem = x, off = 0;
        for (int i = s.ndim - 1; i >= 0; --i) off += (rem % s.shape[i]) * s.strides[i], rem /= s.shape[i];
        at.insert(off);
      }
      CHECK(int64_t(at.size()) == n);
      CHECK(*at.rbegin() * (s.dtype.bits / 8) < int64_t(s.span));
    }
  }
}

TEST_CASE("abi_map: varlen tensors and their offsets round-trip in every layout", "[cpu]") {
  Problem p = problem(2, 2, 1, 3, 4, 5, DType::F32);
  p.varlen = true, p.total_q = 4, p.total_k = 6;
  HostTensor cu_q(DType::I32, {3}), cu_k(DType::I32, {3});
  cu_q.set(1, 1), cu_q.set(2, 4), cu_k.set(1, 2), cu_k.set(2, 6);
  for (Layout layout : {Layout::Compact, Layout::Bshd, Layout::Padded}) {
    CAPTURE(layout_name(layout));
    const CallPlan plan = plan_call(p, layout, false);
    const HostTensor q = iota(DType::F32, shape_q(p), 1), k = iota(DType::F32, shape_kv(p), 2),
                     v = iota(DType::F32, shape_v(p), 3);
    std::vector<unsigned char> arena(plan.bytes), before;
    HostArgs in;
    in.q = &q, in.k = &k, in.v = &v, in.cu_q = &cu_q, in.cu_k = &cu_k;
    pack(plan, in, arena.data());
    before = arena;
    fc_forward_args a;
    make_args(plan, arena.data(), {kDLCPU, 0}, &a, nullptr);
    REQUIRE(a.cu_seqlens_k.data != nullptr);
    CHECK(static_cast<const int32_t*>(a.cu_seqlens_k.data)[2] == 6);
    CHECK(static_cast<const int32_t*>(a.cu_seqlens_q.data)[1] == 1);
    const int64_t* qs = a.q.strides;
    const int64_t* os = a.o.strides;
    for (int64_t t = 0; t < 4; ++t)  // o[t, h, c] = q[t, h, c] + 1 through the strides (compact: none)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t c = 0; c < 5; ++c) {
          const int64_t qi = qs ? t * qs[0] + h * qs[1] + c * qs[2] : (t * 2 + h) * 5 + c;
          const int64_t oi = os ? t * os[0] + h * os[1] + c * os[2] : (t * 2 + h) * 5 + c;
          static_cast<float*>(a.o.data)[oi] = static_cast<float*>(a.q.data)[qi] + 1;
        }
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t t = 0; t < 4; ++t)
        static_cast<float*>(a.lse.data)[a.lse.strides ? h * a.lse.strides[0] + t : h * 4 + t] = float(t);
    HostTensor o(DType::F32, shape_o(p)), lse(DType::F32, shape_lse(p));
    HostOuts out;
    out.o = &o, out.lse = &lse;
    CHECK(unpack(plan, arena.data(), before.data(), out) == "");
    for (int64_t x = 0; x < o.numel(); ++x) REQUIRE(o.get(x) == q.get(x) + 1);
    for (int64_t x = 0; x < lse.numel(); ++x) REQUIRE(lse.get(x) == double(x % 4));
  }
}

TEST_CASE("abi_map: padded offsets reach fc_problem, and a write on a padding token is named", "[cpu]") {
  // Two sequences: queries (2, 1) at padded offsets 1 and 4 of 6 tokens; keys (3, 2) at 0 and 4 of 7.
  Problem p = problem(2, 2, 1, 2, 3, 4, DType::F32);
  p.varlen = true, p.padded = true, p.total_q = 6, p.total_k = 7;
  HostTensor cu_q(DType::I32, {3}), cu_k(DType::I32, {3}), pad_q(DType::I32, {3}), pad_k(DType::I32, {3});
  cu_q.set(1, 2), cu_q.set(2, 3), cu_k.set(1, 3), cu_k.set(2, 5);
  pad_q.set(0, 1), pad_q.set(1, 4), pad_q.set(2, 6), pad_k.set(1, 4), pad_k.set(2, 7);
  const std::vector<bool> padding_q = {true, false, false, true, false, true};  // tokens 0, 3, 5
  for (Layout layout : {Layout::Compact, Layout::Bshd, Layout::Padded}) {
    CAPTURE(layout_name(layout));
    const CallPlan plan = plan_call(p, layout, false);
    REQUIRE(plan.slot[kCuSeqlensQPadded].present);
    REQUIRE(plan.slot[kCuSeqlensKPadded].present);
    const HostTensor q = iota(DType::F32, shape_q(p), 1), k = iota(DType::F32, shape_kv(p), 2),
                     v = iota(DType::F32, shape_v(p), 3);
    std::vector<unsigned char> arena(plan.bytes), before;
    HostArgs in;
    in.q = &q, in.k = &k, in.v = &v, in.cu_q = &cu_q, in.cu_k = &cu_k;
    in.cu_q_padded = &pad_q, in.cu_k_padded = &pad_k;
    pack(plan, in, arena.data());
    before = arena;
    const fc_problem fp = problem_args(plan, arena.data(), {kDLCPU, 0});
    REQUIRE(fp.cu_seqlens_q_padded.ndim == 1);
    CHECK(fp.cu_seqlens_q_padded.shape[0] == 3);
    CHECK(static_cast<const int32_t*>(fp.cu_seqlens_q_padded.data)[1] == 4);
    CHECK(static_cast<const int32_t*>(fp.cu_seqlens_k_padded.data)[2] == 7);
    CHECK(problem_args(plan, nullptr, {kDLCPU, 0}).cu_seqlens_k_padded.data == nullptr);  // supports()
    fc_forward_args a;
    make_args(plan, arena.data(), {kDLCPU, 0}, &a, nullptr);
    const int64_t* os = a.o.strides;
    auto o_at = [&](int64_t t, int64_t h, int64_t c) {
      return os ? t * os[0] + h * os[1] + c * os[2] : (t * 2 + h) * 4 + c;
    };
    auto lse_at = [&](int64_t h, int64_t t) { return a.lse.strides ? h * a.lse.strides[0] + t : h * 6 + t; };
    for (int64_t t = 0; t < 6; ++t)  // every sequence token: o = 2, lse = 1; padding untouched
      for (int64_t h = 0; h < 2 && !padding_q[size_t(t)]; ++h) {
        static_cast<float*>(a.lse.data)[lse_at(h, t)] = 1.0f;
        for (int64_t c = 0; c < 4; ++c) static_cast<float*>(a.o.data)[o_at(t, h, c)] = 2.0f;
      }
    HostTensor o(DType::F32, shape_o(p)), lse(DType::F32, shape_lse(p));
    HostOuts out;
    out.o = &o, out.lse = &lse;
    REQUIRE(unpack(plan, arena.data(), before.data(), out) == "");
    for (int64_t x = 0; x < o.numel(); ++x) CHECK(o.get(x) == (padding_q[size_t(x / 8)] ? 0.0 : 2.0));  // NaN -> 0
    for (int64_t x = 0; x < lse.numel(); ++x) CHECK(lse.get(x) == (padding_q[size_t(x % 6)] ? 0.0 : 1.0));
    std::vector<unsigned char> bad = arena;
    static_cast<float*>(static_cast<void*>(bad.data() + plan.slot[kO].offset))[o_at(3, 1, 2)] = 0.0f;
    CHECK(unpack(plan, bad.data(), before.data(), out) ==
          "the kernel wrote o element (3, 1, 2), on padding token 3 that no sequence holds");
    bad = arena;
    static_cast<float*>(static_cast<void*>(bad.data() + plan.slot[kLse].offset))[lse_at(0, 5)] = 0.0f;
    CHECK(unpack(plan, bad.data(), before.data(), out) ==
          "the kernel wrote lse element (0, 5), on padding token 5 that no sequence holds");
  }
}
