// The error model on the GPU against the CPU's (label gpu; exit 77 without a device). Both evaluate
// the same formulas on the same certified reference; only the order of their fp64 sums differs, so
// every bound must agree to a few ulps (kRel), elementwise on o, lse, d_q, d_k and d_v:
//   - on dense problems with GQA, d_v != d, both causal alignments, windows, rows that see no key, and
//     forward-only problems;
//   - under the CUDA kernels' arithmetic at several key tiles (rescale chains, lane-structured l), a
//     serial round-to-nearest one, one in any order with directed rounding, and the flags that change
//     terms (S and dP stored, P stored before l, dS from the stored P, P normalised, FA1 merges,
//     operands narrower than storage, exp(0) exact or not);
//   - every arithmetic of a shape at once (those sharing their scores and dP run as one set of passes,
//     each with its own terms), error_bounds_max over several tiles (one set) and over two softmax
//     types (two), and ref::bounds's dispatch (which side ran);
//   - a negative control: the comparison fails between two tiles' bounds, so it can fail.
#include "tests/catch.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "reference/bounds.hpp"
#include "reference/certified.hpp"
#include "reference/gpu/bounds_gpu.hpp"
#include "reference/gpu/certified_gpu.hpp"
#include "reference/gpu/oracle_select.hpp"
#include "reference/tests/certified_cases.hpp"

namespace fc::ref {
namespace {

constexpr double kRel = 0x1p-36;  // relative agreement of the two sides' bounds (their slack is 2^-30)

Tensors64 random_inputs(const Problem& p, double sigma, uint64_t seed, bool grads = true) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  auto draw = [&](int64_t n, double s) {
    std::vector<double> x(static_cast<size_t>(n), 0.0);
    for (double& e : x) e = std::round(std::clamp(s * nd(rng), -4.0, 4.0) * 64) / 64;
    return x;
  };
  Tensors64 in;
  in.q = draw(numel_q(p), sigma), in.k = draw(numel_kv(p), sigma), in.v = draw(numel_v(p), 1.0);
  if (grads) in.d_o = draw(numel_o(p), 1.0);
  return in;
}

using testing::shape;

// The worst relative disagreement of two bounds on one tensor (non-finite values must be equal), and
// where; false when some element disagrees past kRel.
struct Agreement {
  double worst = 0;
  long at = -1;
  bool ok = true;
};
Agreement agree(const std::vector<double>& a, const std::vector<double>& b) {
  Agreement g;
  if (a.size() != b.size()) {
    g.ok = false;
    return g;
  }
  for (size_t x = 0; x < a.size(); ++x) {
    if (!std::isfinite(a[x]) || !std::isfinite(b[x])) {
      const bool same = std::isnan(a[x]) ? std::isnan(b[x]) : a[x] == b[x];
      if (!same) g.ok = false, g.at = long(x), g.worst = INFINITY;
      continue;
    }
    const double m = std::max(std::fabs(a[x]), std::fabs(b[x]));
    const double r = m > 0 ? std::fabs(a[x] - b[x]) / m : 0.0;
    if (r > g.worst) g.worst = r, g.at = long(x);
    if (r > kRel) g.ok = false;
  }
  return g;
}

bool all_agree(const std::string& name, const Bounds& gpu, const Bounds& cpu, bool print = true) {
  bool ok = true;
  const char* names[] = {"o", "lse", "d_q", "d_k", "d_v"};
  const std::vector<double>* g[] = {&gpu.o, &gpu.lse, &gpu.d_q, &gpu.d_k, &gpu.d_v};
  const std::vector<double>* c[] = {&cpu.o, &cpu.lse, &cpu.d_q, &cpu.d_k, &cpu.d_v};
  std::string line;
  for (int t = 0; t < 5; ++t) {
    const Agreement a = agree(*g[t], *c[t]);
    ok = ok && a.ok;
    char buf[200];
    if (a.ok) {
      std::snprintf(buf, sizeof buf, " %s %.2g", names[t], a.worst);
    } else {
      const auto at = [&](const std::vector<double>* v) {
        return a.at >= 0 && size_t(a.at) < v->size() ? (*v)[size_t(a.at)] : 0.0;
      };
      std::snprintf(buf, sizeof buf, " %s %.2g FAIL at %ld: gpu %.17g cpu %.17g", names[t], a.worst, a.at, at(g[t]),
                    at(c[t]));
    }
    line += buf;
  }
  if (print) std::printf("%-60s%s\n", name.c_str(), line.c_str());
  return ok;
}

struct Arith {
  std::string name;
  Arithmetic ar;
};

// The arithmetics the test runs, for storage t.
std::vector<Arith> arithmetics(DType t) {
  std::vector<Arith> out;
  for (int bn : {16, 64, 128})
    out.push_back({"tensor core bn " + std::to_string(bn), tensor_core_arithmetic(t, 64, bn, bn)});
  out.push_back({"tensor core bm 128 bn 64 dq one chain", tensor_core_arithmetic(t, 128, 64, 0)});
  Arithmetic serial;
  serial.s = serial.pv = serial.l = serial.d_o_o = serial.dp = serial.dq = serial.dkv = serial_chain(DType::F32, false);
  serial.pv.block = serial.l.block = 32;
  serial.pv.merge = Merge::Rescale;
  serial.l.merge = Merge::Serial, serial.l.merge_old = 2;
  serial.operand = t;
  declare_glibc_libm(serial);
  out.push_back({"serial nearest, exp(0) exact", serial});
  Arithmetic fa1 = serial;
  fa1.pv.merge = Merge::Serial, fa1.pv.merge_old = 2, fa1.pv.merge_new = 1;
  fa1.o_normalise = 0;
  out.push_back({"FA1 merges", fa1});
  Arithmetic stored = serial;
  stored.stores_s = stored.l_sums_stored_p = stored.ds_from_stored_p = true;
  out.push_back({"S, dP stored; l over stored P; dS from stored P", stored});
  Arithmetic normalised = serial;
  normalised.p_normalised = true, normalised.o_normalise = 2;
  out.push_back({"P normalised", normalised});
  Arithmetic any = undeclared_arithmetic(t);
  any.p_from = PFrom::Max, any.kv_per_head = false;
  out.push_back({"any order, directed rounding", any});
  if (t == DType::F32) {
    Arithmetic narrow = tensor_core_arithmetic(t, 64, 64, 64);
    narrow.operand = DType::BF16;  // inputs rounded to a narrower operand type: u_in, floor_in
    out.push_back({"operands in bf16", narrow});
  }
  return out;
}

TEST_CASE("gpu error model: the CPU's bounds on dense problems, every arithmetic", "[gpu]") {
  const std::vector<std::pair<std::string, Problem>> shapes = {
      {"bf16 GQA 4/2 causal_top_left n 300 d 64", shape(2, 4, 2, 300, 300, 64, 64, DType::BF16, Mask::CausalTopLeft)},
      {"f16 no mask n_q 65 n_k 700 d 128", shape(1, 2, 1, 65, 700, 128, 128, DType::F16, Mask::None)},
      {"bf16 bottom_right n_q 200 n_k 333 d 96 d_v 40",
       shape(1, 3, 3, 200, 333, 96, 40, DType::BF16, Mask::CausalBottomRight)},
      {"f32 GQA 6/3 top_left n_q 77 n_k 33 d 40 d_v 72 (empty rows)",
       shape(2, 6, 3, 77, 33, 40, 72, DType::F32, Mask::CausalBottomRight)},
      {"f16 d 256 n 130", shape(1, 1, 1, 130, 130, 256, 256, DType::F16, Mask::CausalTopLeft)},
  };
  uint64_t seed = 11;
  int compared = 0;
  for (auto [name, p] : shapes) {
    for (int variant = 0; variant < 2; ++variant) {
      if (variant == 1) {  // a window on the same shape, and forward only
        p.window_left = 37, p.window_right = 5;
        name += " window 37/5, forward only";
      }
      const Tensors64 in = random_inputs(p, 1.0 + variant, seed++, variant == 0);
      const Certified ref = certified(p, in);
      std::vector<Precision> every;
      for (const Arith& a : arithmetics(p.dtype)) {
        const Precision prec = precision_for(p, a.ar);
        REQUIRE(gpu::bounds_not_covered(p, prec).empty());
        const Bounds c = error_bounds_max(p, in, ref, {prec}), g = gpu::error_bounds_max(p, in, ref, {prec});
        INFO(name + " / " + a.name);
        CHECK(all_agree(name + " / " + a.name, g, c));
        ++compared;
        every.push_back(prec);
      }
      // All of them at once: those that share their scores and dP share a set of passes, each with its
      // own chains and constants (at d <= 128; wider, one a set). With the dot products on the tensor
      // cores (the default, above too) and on the CUDA cores.
      const Bounds c_all = error_bounds_max(p, in, ref, every);
      for (const bool tc : {true, false}) {
        gpu::Timing t;
        const Bounds g_all = gpu::error_bounds_max(p, in, ref, every, &t, gpu::Schedule{tc});
        const std::string what = name + " / every arithmetic at once, " + std::to_string(t.sets) + " sets, " +
                                 (tc ? "tensor" : "CUDA") + " cores";
        INFO(what);
        CHECK(all_agree(what, g_all, c_all));
        if (p.d <= 128 && head_dim_v(p) <= 128) CHECK(t.sets < int(every.size()));
      }
    }
  }
  CHECK(compared > 50);
}

TEST_CASE("gpu error model: several tiles at once, the dispatch, and a comparison that fails", "[gpu]") {
  const Problem p = shape(1, 4, 2, 257, 513, 64, 64, DType::BF16, Mask::CausalBottomRight);
  const Tensors64 in = random_inputs(p, 1.5, 99);
  const Certified ref = certified(p, in);
  std::vector<Precision> precs;
  for (int bn : {16, 32, 64, 128, 256})
    precs.push_back(precision_for(p, tensor_core_arithmetic(p.dtype, p.n_q, bn, 0)));
  gpu::Timing t;
  CHECK(all_agree("max over tiles 16..256", gpu::error_bounds_max(p, in, ref, precs, &t),
                  error_bounds_max(p, in, ref, precs)));
  CHECK(t.sets == 1);  // the five tiles share their scores and dP: one set of passes
  // Precisions whose last roundings differ (the softmax type): each rounded on its own, then the max;
  // their scores' roundings differ too, so each takes a set.
  Precision f64_soft = precs[1];
  f64_soft.ar.soft = DType::F64;
  CHECK(all_agree("max over a tile in fp32 and one in fp64",
                  gpu::error_bounds_max(p, in, ref, {precs[3], f64_soft}, &t),
                  error_bounds_max(p, in, ref, {precs[3], f64_soft})));
  CHECK(t.sets == 2);
  // The comparison can fail: tile 16's bounds against tile 128's differ past kRel.
  const Bounds g16 = gpu::error_bounds_max(p, in, ref, {precs[0]}), c128 = error_bounds_max(p, in, ref, {precs[3]});
  CHECK_FALSE(all_agree("negative control: tile 16 (gpu) against tile 128 (cpu)", g16, c128));
  // ref::bounds: the GPU under --oracle gpu on a covered problem, the CPU where it is not covered.
  set_oracle(OracleKind::Gpu);
  std::string where;
  const Bounds d = bounds(p, in, ref, precs, &where);
  CHECK(where == "gpu");
  CHECK(all_agree("dispatch", d, error_bounds_max(p, in, ref, precs), false));
  Problem capped = p;
  capped.softcap = 30;
  const Certified ref_c = certified(capped, in);
  CHECK_FALSE(gpu::bounds_not_covered(capped, precs[0]).empty());
  (void)bounds(capped, in, ref_c, {precision_for(capped, tensor_core_arithmetic(p.dtype, 64, 64, 0))}, &where);
  CHECK(where == "cpu");
  set_oracle(OracleKind::Cpu);
  (void)bounds(p, in, ref, precs, &where);
  CHECK(where == "cpu");
  set_oracle(OracleKind::Auto);
}

// Not a test of correctness: the time of the GPU oracle and the GPU error model on one larger shape,
// printed (run by hand with "[.time]"; FC_GPU_TIME_SHAPE="batch,heads,n,d", default 1,4,4096,128),
// bf16, no mask, forward+backward, compare's five candidate tiles.
TEST_CASE("gpu error model: time of one bf16 forward+backward", "[.time]") {
  int b = 1, h = 4, n = 4096, d = 128;
  if (const char* s = std::getenv("FC_GPU_TIME_SHAPE")) REQUIRE(std::sscanf(s, "%d,%d,%d,%d", &b, &h, &n, &d) == 4);
  const Problem p = shape(b, h, h, n, n, d, d, DType::BF16, Mask::None);
  const Tensors64 in = random_inputs(p, 1.0, 5);
  auto t0 = std::chrono::steady_clock::now();
  const Certified g = gpu::certified(p, in);
  const double t_oracle = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<Precision> precs;
  for (int bn : {16, 32, 64, 128, 256})
    precs.push_back(precision_for(p, tensor_core_arithmetic(p.dtype, p.n_q, bn, 0)));
  // The dot products on the tensor cores (the default), then the five tiles again on the CUDA cores.
  gpu::Timing one_t, all_t, cuda_t;
  const Bounds one = gpu::error_bounds_max(p, in, g, {precs[2]}, &one_t);
  const Bounds all = gpu::error_bounds_max(p, in, g, precs, &all_t);
  const Bounds cuda = gpu::error_bounds_max(p, in, g, precs, &cuda_t, gpu::Schedule{false});
  std::printf(
      "b%d h%d N%d d%d bf16 fwd+bwd: gpu oracle %.3f s; gpu error model one tile %.3f s, tiles 16..256 %.3f s\n", b, h,
      n, d, t_oracle, one_t.total, all_t.total);
  for (const auto& [name, t] : {std::pair{"one tile", one_t}, std::pair{"five tiles", all_t},
                                std::pair{"five tiles, dot products on the CUDA cores", cuda_t}})
    std::printf("  %s: forward %.3f s, backward rows %.3f s, backward keys %.3f s, host and copies %.3f s\n", name,
                t.forward, t.backward_rows, t.backward_keys, t.total - t.forward - t.backward_rows - t.backward_keys);
  CHECK(all.o.size() == one.o.size());
  CHECK(all_agree("five tiles, tensor cores against CUDA cores", all, cuda));
}

}  // namespace
}  // namespace fc::ref
