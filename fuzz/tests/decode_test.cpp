// The structured decoder: every byte string is a case the kernel claims, within the limits, and the
// value modes reach what the campaign is for (NaN, +-inf, subnormals, the dtype's largest values).
#include "tests/catch.hpp"
#include <cmath>
#include <random>
#include <set>

#include "fuzz/decode.hpp"
#include "reference/bounds.hpp"

using namespace fc;

TEST_CASE("decode_case turns any bytes into a case the kernel claims, within the limits", "[cpu]") {
  std::mt19937_64 rng(7);
  fuzz::ShapeLimits lim;
  lim.max_n = 12, lim.max_d = 6;
  int kernels = 0;
  for (const Kernel& k : registry()) {  // every correct CPU attention kernel of the registry
    if (k.info.mutant || k.info.device != "cpu" || k.info.kind != KernelKind::Attention) continue;
    ++kernels;
    const std::string& name = k.info.name;
    for (int iter = 0; iter < 300; ++iter) {
      std::string bytes(size_t(rng() % 600), '\0');
      for (char& c : bytes) c = char(rng());
      fuzz::ByteSource src(bytes);
      const props::Case c = fuzz::decode_case(src, k, lim);
      const Problem& p = c.in.p;
      CAPTURE(name, iter);
      REQUIRE(claims(k, p));
      CHECK(p.n_q <= lim.max_n);
      CHECK(p.n_k <= lim.max_n);
      CHECK(p.d <= lim.max_d);
      CHECK(std::isfinite(p.scale));
      CHECK(c.in.q.bytes.size() == size_t(numel_q(p)) * size_t(dtype_size(p.dtype)));
      CHECK(c.in.k.bytes.size() == size_t(numel_kv(p)) * size_t(dtype_size(p.dtype)));
      if (c.in.has_d_o()) CHECK(c.in.d_o.shape == c.in.q.shape);
    }
  }
  CHECK(kernels >= 2);  // cpu_naive and cpu_tiled at least
  // No bytes at all: the plainest case (everything zero, one of each dimension).
  fuzz::ByteSource none(std::string_view{});
  const props::Case c = fuzz::decode_case(none, *find_kernel("cpu_tiled"));
  CHECK(c.in.p.n_q == 1);
  CHECK(c.in.p.d == 1);
}

TEST_CASE("the decoder reaches NaN, infinities, subnormals and the largest values of every dtype", "[cpu]") {
  const Kernel& k = *find_kernel("cpu_tiled");
  std::map<DType, std::set<std::string>> seen;
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    fuzz::ByteSource src(seed);
    const props::Case c = fuzz::decode_case(src, k);
    const DType t = c.in.p.dtype;
    for (const HostTensor* x : {&c.in.q, &c.in.k, &c.in.v})
      for (int64_t i = 0; i < x->numel(); ++i) {
        const double v = x->get(i);
        if (std::isnan(v)) seen[t].insert("nan");
        if (std::isinf(v)) seen[t].insert(v > 0 ? "+inf" : "-inf");
        if (v != 0 && std::fabs(v) < ref::min_normal(t)) seen[t].insert("subnormal");
        if (std::fabs(v) == max_finite(t)) seen[t].insert("max");
        if (v == 0 && std::signbit(v)) seen[t].insert("-0");
      }
  }
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    CAPTURE(dtype_name(t));
    CHECK(seen[t] == std::set<std::string>{"nan", "+inf", "-inf", "subnormal", "max", "-0"});
  }
}

TEST_CASE("a seeded byte source is reproducible and a case's shape decodes apart from its values", "[cpu]") {
  const Kernel& k = *find_kernel("cpu_tiled");
  fuzz::ByteSource a(42), b(42);
  const props::Case x = fuzz::decode_case(a, k), y = fuzz::decode_case(b, k);
  CHECK(x.in.q.bytes == y.in.q.bytes);
  CHECK(x.in.v.bytes == y.in.v.bytes);
  fuzz::ByteSource s(9);
  props::Case c = fuzz::decode_shape(s, k, fuzz::ShapeLimits{});
  const Problem p = c.in.p;
  fuzz::ByteSource v(10);
  fuzz::decode_values(v, c, {fuzz::Values::SmallInt});
  CHECK(c.in.p.n_q == p.n_q);
  for (int64_t i = 0; i < c.in.q.numel(); ++i) CHECK(std::fabs(c.in.q.get(i)) <= 4);
  fuzz::Values m;
  CHECK(fuzz::parse_values("raw", &m));
  CHECK(m == fuzz::Values::Raw);
  CHECK_FALSE(fuzz::parse_values("Raw", &m));
}
