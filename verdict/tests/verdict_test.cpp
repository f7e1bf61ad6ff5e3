// The verdict layer on cpu_tiled's runs: what it sends a kernel, which tensors it holds, and what its
// verdict says when one element leaves its bound.
#include "tests/catch.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "verdict/verdict.hpp"

namespace {

using namespace fc;

// A 2-head F16 case with d_o: q, k, v, d_o small multiples of 1/8 (exact in F16).
Inputs small_case() {
  const Problem p{.heads_q = 2, .heads_kv = 2, .n_q = 5, .n_k = 7, .d = 4, .dtype = DType::F16, .scale = 0.5};
  auto fill = [](const std::vector<int64_t>& shape, int salt) {
    std::vector<double> x(size_t(shape[0] * shape[1] * shape[2] * shape[3]));
    for (size_t i = 0; i < x.size(); ++i) x[i] = double(int64_t(i * 7 + size_t(salt) * 3) % 13 - 6) / 8;
    return HostTensor::from_f64(DType::F16, shape, x);
  };
  Inputs in{p, fill(shape_q(p), 1), fill(shape_kv(p), 2), fill(shape_kv(p), 3), fill(shape_q(p), 4)};
  return in;
}

const Kernel& tiled() {
  const Kernel* k = find_kernel("cpu_tiled");
  REQUIRE(k);
  return *k;
}

}  // namespace

TEST_CASE("execute sends a kernel only the problems it claims", "[cpu]") {
  Kernel declines = tiled();
  declines.supports = [](const Problem&) { return false; };
  CHECK_THROWS_AS(verdict::execute(declines, small_case(), Config{}, true), verdict::NotApplicable);
}

TEST_CASE("a correct kernel's run holds o, lse and the gradients within their bounds", "[cpu]") {
  const Inputs in = small_case();
  const verdict::Run r = verdict::execute(tiled(), in, Config{}, true);
  REQUIRE(r.error.empty());
  const verdict::Oracle o = verdict::oracle(tiled(), in, Config{});
  const std::vector<verdict::TensorVerdict> held = verdict::hold(in, r.out, o.ref, o.bounds, true);
  std::vector<std::string> names;
  for (const verdict::TensorVerdict& t : held) {
    names.push_back(t.tensor);
    CHECK(t.held.ok);
    CHECK(t.bound->size() == t.got.size());
  }
  CHECK(names == std::vector<std::string>{"o", "lse", "d_q", "d_k", "d_v"});
  CHECK(held[1].dtype == DType::F32);  // lse in the contract's type
  CHECK(verdict::check_outputs(tiled(), in, r.out, o).empty());
}

TEST_CASE("an element past its bound fails its tensor, and the message names it", "[cpu]") {
  const Inputs in = small_case();
  verdict::Run r = verdict::execute(tiled(), in, Config{}, true);
  REQUIRE(r.error.empty());
  const verdict::Oracle o = verdict::oracle(tiled(), in, Config{});
  const int64_t at = 1 * 5 * 4 + 3 * 4 + 2;  // o[b=0,h=1,i=3,c=2]
  r.out.o.set(at, r.out.o.get(at) + 0.5);
  const std::vector<verdict::TensorVerdict> held = verdict::hold(in, r.out, o.ref, o.bounds, true);
  REQUIRE(held.size() == 5);
  CHECK_FALSE(held[0].held.ok);
  CHECK(held[0].held.worst == at);
  for (size_t x = 1; x < held.size(); ++x) CHECK(held[x].held.ok);
  const std::string msg = verdict::check_outputs(tiled(), in, r.out, o);
  CHECK(msg.rfind("o: o[b=0,h=1,i=3,c=2] = ", 0) == 0);
  CHECK(msg.find("error exceeds the bound") != std::string::npos);
  CHECK(std::count(msg.begin(), msg.end(), '\n') == 1);
}

TEST_CASE("hold gives no verdict without a bound and leaves out what the run lacks", "[cpu]") {
  const Inputs in = small_case();
  verdict::Run r = verdict::execute(tiled(), in, Config{}, true);
  REQUIRE(r.error.empty());
  r.out.o.set(0, r.out.o.get(0) + 0.5);
  r.out.d_k = HostTensor(), r.out.d_v = HostTensor();  // one row's check gives no d_k, d_v
  const ref::Certified c = verdict::certify(in);
  const ref::Bounds none;
  const std::vector<verdict::TensorVerdict> unbounded = verdict::hold(in, r.out, c, none, false);
  REQUIRE(unbounded.size() == 2);  // o and d_q: lse not asked for
  CHECK(std::string(unbounded[0].tensor) == "o");
  CHECK(std::string(unbounded[1].tensor) == "d_q");
  for (const verdict::TensorVerdict& t : unbounded) CHECK((t.held.ok && t.bound->empty()));
  CHECK(verdict::failures(in.p, unbounded).empty());
}

TEST_CASE("a NaN where the reference is finite fails whatever the bound", "[cpu]") {
  const Inputs in = small_case();
  verdict::Run r = verdict::execute(tiled(), in, Config{}, true);
  REQUIRE(r.error.empty());
  const verdict::Oracle o = verdict::oracle(tiled(), in, Config{});
  r.out.d_q.set(3, std::nan(""));
  const std::string msg = verdict::check_outputs(tiled(), in, r.out, o);
  CHECK(msg.rfind("d_q: d_q[b=0,h=0,i=0,c=3] = nan, ", 0) == 0);
  CHECK(msg.find("NaN where the reference is finite") != std::string::npos);
}
