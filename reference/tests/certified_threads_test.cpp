// The certified oracle's parallel loops (reference/parallel.hpp) cut the work into the same tasks
// whatever the thread count, so its values and bounds are bitwise the same on 1 thread and on many;
// so are the error model's bounds (reference/bounds.cpp: kv heads, then fixed lanes of row blocks).
#include <Eigen/Core>
#include "tests/catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>

#include "reference/bounds.hpp"
#include "reference/certified.hpp"
#include "reference/parallel.hpp"
#include "reference/tests/certified_cases.hpp"

namespace {

using fc::ref::Certified;

fc::ref::Certified with_threads(const char* threads, const fc::ref::testing::CertifiedCase& c) {
  setenv("FC_THREADS", threads, 1);
  Certified out = fc::ref::certified(c.p, c.in);
  unsetenv("FC_THREADS");
  return out;
}

fc::ref::Bounds bounds_with_threads(const char* threads, const fc::ref::testing::CertifiedCase& c,
                                    const fc::ref::Certified& ref, const fc::ref::Precision& prec) {
  setenv("FC_THREADS", threads, 1);
  fc::ref::Bounds out = fc::ref::error_bounds(c.p, c.in, ref, prec);
  unsetenv("FC_THREADS");
  return out;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// Past the size below which the oracle runs on one thread: 2 batches x 2 kv heads (GQA 2:1) x 320
// rows x 384 keys x d = 64, bottom-right causal, fp16-representable values.
fc::ref::testing::CertifiedCase large_case() {
  using namespace fc;
  fc::ref::testing::CertifiedCase c;
  c.name = "large causal GQA";
  c.p = fc::ref::testing::shape(2, 4, 2, 320, 384, 64, DType::F16, Mask::CausalBottomRight, 0.125);
  std::mt19937_64 rng(11);
  std::normal_distribution<double> dist(0.0, 1.0);
  auto fill = [&](std::vector<double>& x, int64_t n) {
    x.resize(size_t(n));
    for (double& e : x) e = double(float(Eigen::half(float(dist(rng)))));  // some fp16 value
  };
  fill(c.in.q, numel_q(c.p)), fill(c.in.k, numel_kv(c.p)), fill(c.in.v, numel_kv(c.p)), fill(c.in.d_o, numel_q(c.p));
  return c;
}

}  // namespace

TEST_CASE("certified gives the same bits on 1 thread and on 5", "[cpu]") {
  int checked = 0;
  std::vector<fc::ref::testing::CertifiedCase> cases = fc::ref::testing::certified_cases();
  cases.push_back(large_case());
  for (const auto& c : cases) {
    const Certified one = with_threads("1", c), five = with_threads("5", c);
    INFO(c.name);
    for (auto [a, b] : {std::pair{&one.value, &five.value}, std::pair{&one.err, &five.err}}) {
      CHECK(same_bits(a->o, b->o));
      CHECK(same_bits(a->lse, b->lse));
      CHECK(same_bits(a->d_q, b->d_q));
      CHECK(same_bits(a->d_k, b->d_k));
      CHECK(same_bits(a->d_v, b->d_v));
    }
    CHECK(same_bits(one.o_mag, five.o_mag));
    ++checked;
  }
  CHECK(checked > 5);
}

TEST_CASE("error bounds give the same bits on 1 thread and on 5", "[cpu][volume]") {
  using namespace fc;
  std::vector<fc::ref::testing::CertifiedCase> cases = fc::ref::testing::certified_cases();
  cases.push_back(large_case());
  // MQA, 8 heads on one kv head: 8 x 5 row blocks of 64 dealt to 16 lanes, per-head stored d_k, d_v.
  fc::ref::testing::CertifiedCase mqa = large_case();
  mqa.name = "large MQA";
  mqa.p = fc::ref::testing::shape(1, 8, 1, 320, 384, 64, DType::F16, Mask::CausalBottomRight, 0.125);
  mqa.in.q.resize(size_t(numel_q(mqa.p))), mqa.in.d_o.resize(size_t(numel_q(mqa.p)));
  mqa.in.k.resize(size_t(numel_kv(mqa.p))), mqa.in.v.resize(size_t(numel_kv(mqa.p)));
  cases.push_back(mqa);
  int checked = 0;
  for (const auto& c : cases) {
    INFO(c.name);
    const Certified ref = fc::ref::certified(c.p, c.in);
    std::vector<fc::ref::Precision> precs = {fc::ref::Precision{c.p.dtype, undeclared_arithmetic(c.p.dtype)}};
    if (c.p.dtype == DType::F16) precs.push_back({c.p.dtype, tensor_core_arithmetic(c.p.dtype, 64, 64, 0)});
    for (const fc::ref::Precision& prec : precs) {
      const fc::ref::Bounds one = bounds_with_threads("1", c, ref, prec), five = bounds_with_threads("5", c, ref, prec);
      for (auto [a, b] : {std::pair{&one.o, &five.o}, std::pair{&one.lse, &five.lse}, std::pair{&one.d_q, &five.d_q},
                          std::pair{&one.d_k, &five.d_k}, std::pair{&one.d_v, &five.d_v}})
        CHECK(same_bits(*a, *b));
      ++checked;
    }
  }
  CHECK(checked > 5);
}

// compare's unknown key tile: the bound for every candidate tile in one pass over the blocks, the
// products of the inputs shared, gives the bits of each tile's own bound, and the largest of them.
TEST_CASE("error_bounds_max is the elementwise max of error_bounds, bit for bit", "[cpu][volume]") {
  using namespace fc;
  std::vector<fc::ref::testing::CertifiedCase> cases = fc::ref::testing::certified_cases();
  cases.push_back(large_case());
  int checked = 0;
  for (const auto& c : cases) {
    INFO(c.name);
    const Certified ref = fc::ref::certified(c.p, c.in);
    std::vector<fc::ref::Precision> precs;
    for (int32_t bn : {16, 32, 64, 128, 256}) {
      fc::ref::Precision pr{c.p.dtype, tensor_core_arithmetic(c.p.dtype, c.p.n_q, bn, 0)};
      if (c.p.dtype == DType::F64) pr.ar.soft = DType::F64;
      precs.push_back(pr);
    }
    precs.push_back({c.p.dtype, undeclared_arithmetic(c.p.dtype)});  // other chains over d: not shared
    const fc::ref::Bounds all = fc::ref::error_bounds_max(c.p, c.in, ref, precs);
    fc::ref::Bounds want = fc::ref::error_bounds(c.p, c.in, ref, precs[0]);
    for (size_t x = 1; x < precs.size(); ++x) {
      const fc::ref::Bounds b = fc::ref::error_bounds(c.p, c.in, ref, precs[x]);
      for (auto [into, from] : {std::pair{&want.o, &b.o}, std::pair{&want.lse, &b.lse}, std::pair{&want.d_q, &b.d_q},
                                std::pair{&want.d_k, &b.d_k}, std::pair{&want.d_v, &b.d_v}})
        for (size_t i = 0; i < into->size(); ++i)
          (*into)[i] = std::isnan((*into)[i]) || std::isnan((*from)[i]) ? (*into)[i] + (*from)[i]
                                                                          : std::max((*into)[i], (*from)[i]);
    }
    for (auto [a, b] : {std::pair{&all.o, &want.o}, std::pair{&all.lse, &want.lse}, std::pair{&all.d_q, &want.d_q},
                        std::pair{&all.d_k, &want.d_k}, std::pair{&all.d_v, &want.d_v}}) {
      CHECK(a->size() == b->size());
      bool same = a->size() == b->size();
      for (size_t i = 0; same && i < a->size(); ++i)
        same = std::isnan((*a)[i]) ? std::isnan((*b)[i]) : std::memcmp(&(*a)[i], &(*b)[i], sizeof(double)) == 0;
      CHECK(same);
    }
    ++checked;
  }
  CHECK(checked > 5);
}

TEST_CASE("parallel_for runs every task once and rethrows a task's exception", "[cpu]") {
  setenv("FC_THREADS", "4", 1);
  REQUIRE(fc::ref::worker_threads() == 4);
  std::vector<int> hits(1000, 0);
  fc::ref::parallel_for(1000, [&](int64_t t) { ++hits[size_t(t)]; });
  for (int h : hits) CHECK(h == 1);
  std::vector<int> rows(1001, 0);
  fc::ref::parallel_rows(1001, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) ++rows[size_t(r)];
  });
  for (int h : rows) CHECK(h == 1);
  CHECK_THROWS_AS(fc::ref::parallel_for(100,
                                        [](int64_t t) {
                                          if (t == 37) throw std::runtime_error("task 37");
                                        }),
                  std::runtime_error);
  {
    const fc::ref::SerialScope serial(true);  // inside it, no task runs on another thread
    const auto caller = std::this_thread::get_id();
    bool elsewhere = false;
    fc::ref::parallel_for(64, [&](int64_t) { elsewhere = elsewhere || std::this_thread::get_id() != caller; });
    CHECK_FALSE(elsewhere);
  }
  setenv("FC_THREADS", "0", 1);  // not a positive integer: every hardware thread
  CHECK(fc::ref::worker_threads() >= 1);
  unsetenv("FC_THREADS");
}
