// The ABI mapping (kernels/plugin/abi_map.hpp): layouts, the arena's packing and unpacking, and the
// detection of writes a kernel must not make (each detection also shown to fire).
#include "tests/catch.hpp"
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "kernels/plugin/abi_map.hpp"

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

TEST_CASE("abi_map: the problem maps field by field, variants neutral", "[cpu]") {
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
    for (const Slot& s : plan.slot) {
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
  const Slot& so = plan.slot[kO];
  CHECK(poke(so.offset) == "");  // o's first element: an output
  CHECK(poke(so.offset + 4 * 4).find("gaps between the elements of o") != std::string::npos);  // after row 0
  CHECK(poke(so.offset + so.span).find("past the end of o") != std::string::npos);
  CHECK(poke(plan.slot[kK].offset).find("modified its input k") != std::string::npos);
  const Slot& sl = plan.slot[kLse];  // the last tensor: its guard, then alignment padding
  CHECK(poke(sl.offset + sl.span + 63).find("past the end of lse") != std::string::npos);
  CHECK(poke(plan.bytes - 1).find("outside every tensor") != std::string::npos);
}
