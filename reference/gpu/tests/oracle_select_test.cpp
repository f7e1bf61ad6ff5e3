// The oracle dispatch on the host (oracle_select.hpp): parsing `--oracle`, the process-wide choice, the
// CPU path, and the one-line refusal of `--oracle gpu` where the GPU oracle cannot run (no CUDA build,
// no device, or a variant it does not cover). Runs without a GPU (label cpu).
#include "tests/catch.hpp"

#include <cmath>
#include <string>

#include "reference/certified.hpp"
#include "reference/gpu/oracle_select.hpp"

namespace fc::ref {
namespace {

Problem small() {
  Problem p;
  p.batch = 1, p.heads_q = 2, p.heads_kv = 1, p.n_q = 3, p.n_k = 5, p.d = 4;
  p.dtype = DType::F16;
  p.mask = Mask::CausalBottomRight;
  p.scale = 0.5;
  return p;
}

Tensors64 inputs(const Problem& p) {
  Tensors64 in;
  auto fill = [](std::vector<double>& v, int64_t n, double step) {
    v.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::ldexp(double((i * 37) % 23) - 11.0, -3) * step;
  };
  fill(in.q, numel_q(p), 1.0);
  fill(in.k, numel_kv(p), 0.5);
  fill(in.v, numel_v(p), 2.0);
  fill(in.d_o, numel_o(p), 1.0);
  return in;
}

TEST_CASE("oracle_select: --oracle parses cpu, gpu, auto and nothing else", "[cpu]") {
  OracleKind k = OracleKind::Cpu;
  REQUIRE(parse_oracle("auto", &k));
  CHECK(k == OracleKind::Auto);
  REQUIRE(parse_oracle("gpu", &k));
  CHECK(k == OracleKind::Gpu);
  REQUIRE(parse_oracle("cpu", &k));
  CHECK(k == OracleKind::Cpu);
  for (const char* bad : {"", "GPU", "Auto", "cuda", "gpu ", "cpu,gpu", "0"}) {
    INFO(bad);
    CHECK_FALSE(parse_oracle(bad, &k));
    CHECK(k == OracleKind::Cpu);  // untouched
  }
  for (OracleKind kind : {OracleKind::Auto, OracleKind::Cpu, OracleKind::Gpu}) {
    OracleKind back = OracleKind::Auto;
    REQUIRE(parse_oracle(oracle_name(kind), &back));
    CHECK(back == kind);
  }
}

TEST_CASE("oracle_select: the process-wide choice defaults to auto and is kept", "[cpu]") {
  CHECK(oracle() == OracleKind::Auto);
  set_oracle(OracleKind::Cpu);
  CHECK(oracle() == OracleKind::Cpu);
  set_oracle(OracleKind::Auto);
  CHECK(oracle() == OracleKind::Auto);
}

bool same(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

TEST_CASE("oracle_select: --oracle cpu is the CPU oracle, bit for bit", "[cpu]") {
  const Problem p = small();
  const Tensors64 in = inputs(p);
  const Certified want = certified(p, in), got = certify(OracleKind::Cpu, p, in);
  CHECK(same(got.value.o, want.value.o));
  CHECK(same(got.err.o, want.err.o));
  CHECK(same(got.value.d_k, want.value.d_k));
  CHECK(same(got.err.d_v, want.err.d_v));
  CHECK(same(got.o_mag, want.o_mag));
  std::string why;
  CHECK_FALSE(uses_gpu(OracleKind::Cpu, p, in, &why));
  CHECK(why == "--oracle cpu");
}

TEST_CASE("oracle_select: auto falls back to the CPU where the GPU cannot run, and gpu is a one-line error naming why", "[cpu]") {
  Problem p = small();
  p.d = p.d_v = 260;  // head dims past 256: the GPU oracle does not cover them, whatever the machine
  const Tensors64 in = inputs(p);
  std::string why;
  CHECK_FALSE(uses_gpu(OracleKind::Auto, p, in, &why));
  CHECK_FALSE(why.empty());
  CHECK(why.find('\n') == std::string::npos);
  // Auto on a small problem: the size; gpu: the variant (CUDA built, a device present) or the machine.
  CHECK(why.find("small problem") != std::string::npos);
  std::string why_gpu;
  CHECK_FALSE(uses_gpu(OracleKind::Gpu, p, in, &why_gpu));
  const bool names = why_gpu.find("head dims past 256") != std::string::npos ||
                     why_gpu.find("without CUDA") != std::string::npos ||
                     why_gpu.find("no CUDA device") != std::string::npos;
  CHECK(names);
  const Certified a = certify(OracleKind::Auto, p, in), c = certified(p, in);
  CHECK(same(a.value.o, c.value.o));
  CHECK(same(a.err.d_q, c.err.d_q));
  try {
    (void)certify(OracleKind::Gpu, p, in);
    FAIL("--oracle gpu accepted a problem the GPU oracle does not take");
  } catch (const OracleUnavailable& e) {
    const std::string msg = e.what();
    CHECK(msg.rfind("--oracle gpu: ", 0) == 0);
    CHECK(msg.find(why_gpu) != std::string::npos);
  }
}

TEST_CASE("oracle_select: auto leaves small problems to the CPU, and gpu takes them where it can", "[cpu]") {
  const Problem p = small();  // 2 · 3 · 5 · 4 multiply-adds of S
  const Tensors64 in = inputs(p);
  std::string why;
  CHECK_FALSE(uses_gpu(OracleKind::Auto, p, in, &why));
  CHECK(why.find("small problem") != std::string::npos);
  std::string why_gpu;
  const bool gpu = uses_gpu(OracleKind::Gpu, p, in, &why_gpu);
  CHECK(gpu == why_gpu.empty());
  CHECK(why_gpu.find("small") == std::string::npos);  // gpu: only the machine or the variant refuse
}

TEST_CASE("oracle_select: a CPU-only build says so", "[cpu]") {
  if (gpu_oracle_built()) return;  // this build carries the GPU oracle: the previous test covers it
  const Problem p = small();
  std::string why;
  CHECK_FALSE(uses_gpu(OracleKind::Gpu, p, inputs(p), &why));
  CHECK(why == "this flashcheck was built without CUDA");
}

}  // namespace
}  // namespace fc::ref
