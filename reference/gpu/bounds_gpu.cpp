// The GPU error model's host side (bounds_gpu.hpp): the constants come from the CPU model's own
// Consts (bounds_model.hpp), so both sides share every per-problem term; the device computes each
// element's error and its last rounding (bounds_gpu.cu, with rounded_bound, the CPU's function), and
// only the largest bounds over the precisions come back here.
#include "reference/gpu/bounds_gpu.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>

#include "reference/bounds_chain.hpp"
#include "reference/bounds_model.hpp"
#include "reference/gpu/bounds_gpu_dev.hpp"
#include "reference/parallel.hpp"

namespace fc::ref::gpu {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("GPU error model: ") + what + ": " + cudaGetErrorString(e));
}

// A device array, freed with its owner.
template <class T>
struct DevArray {
  T* p = nullptr;
  DevArray() = default;
  explicit DevArray(size_t n) { check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  DevArray(const DevArray&) = delete;
  DevArray& operator=(const DevArray&) = delete;
  ~DevArray() {
    if (p) cudaFree(p);
  }
};
template <class T>
std::unique_ptr<DevArray<T>> upload(const std::vector<T>& v, size_t n_if_empty = 0) {
  auto a = std::make_unique<DevArray<T>>(v.empty() ? n_if_empty : v.size());
  if (v.empty())
    check(cudaMemset(a->p, 0, std::max<size_t>(n_if_empty, 1) * sizeof(T)), "cudaMemset");
  else
    check(cudaMemcpy(a->p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return a;
}
template <class T>
std::vector<T> download(const T* p, size_t n) {
  std::vector<T> v(n);
  if (n) check(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
  return v;
}

const char* chain_name(int x) {
  static const char* names[] = {"l", "pv", "dq", "dkv"};
  return names[x];
}

// Per-row sums of |x| over rows of `width` (k_abs_sum, v_abs_sum).
std::vector<double> abs_sums(const std::vector<double>& x, int64_t width) {
  const int64_t rows = width > 0 ? int64_t(x.size()) / width : 0;
  std::vector<double> s(size_t(rows), 0.0);
  parallel_rows(rows, 4096, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) {
      double t = 0;
      for (int64_t c = 0; c < width; ++c) t += std::fabs(x[size_t(r * width + c)]);
      s[size_t(r)] = t;
    }
  });
  return s;
}

// Whether two precisions give every score and dP the same value and dot error, so one pass computes
// them for both (bounds_gpu_dev.hpp, ModelSet): the same chains over d and d_v and the same roundings
// of the inputs, the scores and the scale. Compared exactly: anything else takes a set of its own.
bool same_weights(const ChainWeights& a, const ChainWeights& b) {
  return a.kappa == b.kappa && a.kappa_max == b.kappa_max && a.scale() == b.scale() && a.floors() == b.floors();
}
bool shares_pairs(const model::Consts& a, const model::Consts& b) {
  return same_weights(a.w_s, b.w_s) && same_weights(a.w_dp, b.w_dp) && same_weights(a.w_D, b.w_D) && a.u_in == b.u_in &&
         a.floor_in == b.floor_in && a.delta_c == b.delta_c && a.us == b.us && a.u_store_s == b.u_store_s &&
         a.floor_store_s == b.floor_store_s;
}

// One precision's device data: its chains over d and d_v, o's and lse's errors (overwritten by their
// finished bounds, which the backward reads), and the backward's outputs.
struct PrecDev {
  std::unique_ptr<DevArray<double>> ks, kdp, kD;
  std::unique_ptr<DevArray<double>> e_o, e_lse, dq_chain, dq_floor, dk_chain, dv_chain, kv_floor, row_stat;
};

}  // namespace

std::string bounds_not_covered(const Problem& p, const Precision& prec) {
  const Arithmetic& ar = prec.ar;
  if (p.varlen || is_paged(p)) return "varlen or paged problems";
  if (per_key_mask(p)) return "mask tensors and block masks";
  if (p.softcap > 0) return "softcap";
  if (p.alibi) return "ALiBi";
  if (p.sinks) return "attention sinks";
  if (ar.p_from != PFrom::Max) return "weights normalised by their lse";
  if (p.d > 256 || head_dim_v(p) > 256) return "head dims past 256";
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) return "this head layout";
  const int64_t group = p.heads_q / p.heads_kv;
  if (ar.kv_per_head && group > 1 && coarser(prec.storage, ar.dkv.acc)) return "per-head gradients of a GQA group";
  const Chain* chains[] = {&ar.l, &ar.pv, &ar.dq, &ar.dkv};
  for (int x = 0; x < 4; ++x) {
    if (x == 3 && is_plain(ar.dkv)) continue;
    if (!closed_form_covers(*chains[x])) return std::string("the structure of chain ") + chain_name(x);
  }
  return "";
}

Bounds error_bounds_max(const Problem& p, const Tensors64& in, const Certified& ref,
                        const std::vector<Precision>& precs, Timing* timing, const Schedule& schedule) {
  const auto start = std::chrono::steady_clock::now();
  Timing tm;
  auto timed = [](double& into, auto&& step) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    into += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (precs.empty()) throw std::invalid_argument("error model: no arithmetic to bound");
  for (const Precision& pr : precs)
    if (const std::string why = bounds_not_covered(p, pr); !why.empty())
      throw std::invalid_argument("GPU error model: does not cover " + why);
  const int64_t group = p.heads_q / p.heads_kv, dv = head_dim_v(p);
  if (p.n_k > kMaxTerms || group * p.n_q > kMaxTerms || p.d > kMaxTerms || dv > kMaxTerms)
    throw std::invalid_argument(
        "error model: a sum of more than 2^20 terms (n_k, heads_q/heads_kv * n_q, d or d_v) is "
        "beyond what its evaluation covers");
  const bool bwd = !in.d_o.empty();
  const int64_t rows = rows_q(p), keys = rows_kv(p);
  Bounds out;
  if (rows == 0 || p.n_k == 0) {  // nothing on the device to do: the CPU model's answer
    if (timing) *timing = Timing{};
    return ref::error_bounds_max(p, in, ref, precs);
  }
  // The data every precision shares.
  const auto q = upload(in.q), k = upload(in.k), v = upload(in.v);
  const auto d_o = upload(in.d_o, 1);
  const auto o = upload(ref.value.o), err_o = upload(ref.err.o, ref.value.o.size());
  const auto lse = upload(ref.value.lse), err_lse = upload(ref.err.lse, ref.value.lse.size());
  const auto k_abs = upload(abs_sums(in.k, p.d)), v_abs = upload(abs_sums(in.v, dv));
  DevArray<uint8_t> live{size_t(rows)};
  std::vector<std::unique_ptr<model::Consts>> consts;
  for (const Precision& prec : precs) consts.push_back(std::make_unique<model::Consts>(p, in, ref, prec));
  const auto kv_i0 = upload(consts.front()->kv_i0), kv_i1 = upload(consts.front()->kv_i1);  // the problem's
  // Where every precision rounds alike (the same soft type and output dtypes: compare's candidate
  // tiles) the gradients are rounded once, at their largest error over the precisions: that bounds
  // each of them, and as the rounding is non-decreasing in the error short of overflow, it is the
  // same bits as the largest of their roundings (docs/error-model.md, "Several tiles").
  bool defer = true;
  for (const Precision& pr : precs)
    defer = defer && pr.ar.soft == precs.front().ar.soft && pr.dtypes() == precs.front().dtypes();
  // The last steps run on the device (launch_finish_o, launch_finish_grads, launch_round_grads): each
  // element's bound is rounded there with rounded_bound, the CPU's function, and only the largest over
  // the precisions comes back. The certified gradients for them, and the running largest bounds.
  const size_t n_o = size_t(rows * dv), n_dq = size_t(rows * p.d), n_dk = size_t(keys * p.d), n_dv = size_t(keys * dv);
  DevArray<double> o_max{n_o}, lse_max{size_t(rows)};
  std::unique_ptr<DevArray<double>> dq_ref, err_dq, dk_ref, err_dk, dv_ref, err_dv, E_dq, E_dk, E_dv, B_dq, B_dk, B_dv;
  GradRef g{};
  if (bwd) {
    dq_ref = upload(ref.value.d_q), err_dq = upload(ref.err.d_q, n_dq), dk_ref = upload(ref.value.d_k);
    err_dk = upload(ref.err.d_k, n_dk), dv_ref = upload(ref.value.d_v), err_dv = upload(ref.err.d_v, n_dv);
    g = GradRef{dq_ref->p, err_dq->p, dk_ref->p, err_dk->p, dv_ref->p, err_dv->p};
    E_dq = std::make_unique<DevArray<double>>(n_dq), E_dk = std::make_unique<DevArray<double>>(n_dk);
    E_dv = std::make_unique<DevArray<double>>(n_dv);
    if (!defer)  // rounded precision by precision into the largest so far (deferred: in place, once)
      B_dq = std::make_unique<DevArray<double>>(n_dq), B_dk = std::make_unique<DevArray<double>>(n_dk),
      B_dv = std::make_unique<DevArray<double>>(n_dv);
  }
  auto finish_of = [](DType soft, const Precision& prec, const model::Consts& kc) {
    const DtypeSet types = prec.dtypes();
    return Finish{rounding_of(soft),    rounding_of(types.o),  rounding_of(kc.lse_type),
                  rounding_of(types.q), rounding_of(types.kv), model::kSlack};
  };
  const bool mma = schedule.tensor_cores && tensor_cores_present();
  // One precision's ModelDev: its constants, the shared data, its own buffers.
  auto model_of = [&](const model::Consts& kc, PrecDev& b) {
    const Arithmetic& ar = kc.ar;
    ModelDev m{};
    m.p = p, m.dv = dv, m.group = group, m.n_q16 = kc.n_q16;
    m.us = kc.us, m.floor_s = kc.floor_s, m.u_in = kc.u_in, m.floor_in = kc.floor_in, m.u_p = kc.u_p;
    m.floor_p = kc.floor_p, m.floor_ds = kc.floor_ds, m.u_store_s = kc.u_store_s, m.floor_store_s = kc.floor_store_s;
    m.delta_c = kc.delta_c, m.delta_out = kc.delta_out, m.delta_l2e = kc.delta_l2e, m.delta_ln2 = kc.delta_ln2;
    m.e_exp = kc.e_exp, m.log_rel = kc.log_rel, m.common_scale = kc.common_scale, m.ftz = kc.ftz;
    b.ks = upload(kc.w_s.kappa), b.kdp = upload(kc.w_dp.kappa), b.kD = upload(kc.w_D.kappa);
    m.w_s = {b.ks->p, kc.w_s.kappa_max, kc.w_s.scale(), kc.w_s.floors()};
    m.w_dp = {b.kdp->p, kc.w_dp.kappa_max, kc.w_dp.scale(), kc.w_dp.floors()};
    m.w_D = {b.kD->p, kc.w_D.kappa_max, kc.w_D.scale(), kc.w_D.floors()};
    m.l = closed_chain(ar.l, kc.ftz), m.pv = closed_chain(ar.pv, kc.ftz), m.dq = closed_chain(ar.dq, kc.ftz);
    m.dkv = closed_chain(ar.dkv, kc.ftz), m.l_chain = ar.l, m.dkv_plain = is_plain(ar.dkv);
    m.mma = mma;
    m.dkv_shape = closed_shape(m.dkv, group * kc.n_q16, 0);
    m.l_acc_u = unit_roundoff(ar.l.acc);
    m.fa1 = ar.pv.merge == Merge::Serial, m.l_sums_stored_p = ar.l_sums_stored_p, m.p_normalised = ar.p_normalised;
    m.exp_exact_at_zero = ar.exp_exact_at_zero, m.base2 = ar.base2, m.ds_from_stored_p = ar.ds_from_stored_p;
    m.o_normalise = ar.o_normalise, m.block_m = ar.block_m;
    m.q = q->p, m.k = k->p, m.v = v->p, m.d_o = d_o->p, m.o = o->p, m.err_o = err_o->p, m.lse = lse->p;
    m.err_lse = err_lse->p, m.k_abs_sum = k_abs->p, m.v_abs_sum = v_abs->p;
    m.kv_i0 = kv_i0->p, m.kv_i1 = kv_i1->p;
    b.e_o = std::make_unique<DevArray<double>>(size_t(rows * dv));
    b.e_lse = std::make_unique<DevArray<double>>(size_t(rows));
    m.e_o = b.e_o->p, m.b_o = b.e_o->p, m.e_lse = b.e_lse->p, m.b_lse = b.e_lse->p, m.live = live.p;
    if (bwd) {
      b.dq_chain = std::make_unique<DevArray<double>>(size_t(rows * p.d));
      b.dq_floor = std::make_unique<DevArray<double>>(size_t(rows));
      b.dk_chain = std::make_unique<DevArray<double>>(size_t(keys * p.d));
      b.dv_chain = std::make_unique<DevArray<double>>(size_t(keys * dv));
      b.kv_floor = std::make_unique<DevArray<double>>(size_t(keys));
      b.row_stat = std::make_unique<DevArray<double>>(size_t(rows * kRowStat));
      m.dq_chain = b.dq_chain->p, m.dq_floor = b.dq_floor->p, m.dk_chain = b.dk_chain->p, m.dv_chain = b.dv_chain->p;
      m.kv_floor = b.kv_floor->p, m.row_stat = b.row_stat->p;
    }
    return m;
  };
  // A precision's device bytes past the shared data: a set takes as many as fit in 40 % of what is free.
  const double prec_bytes =
      double(sizeof(double)) *
      double(rows * dv + rows + (bwd ? rows * p.d + rows + keys * p.d + keys * dv + keys + rows * kRowStat : 0));
  int folded_o = 0, folded_grads = 0;  // precisions folded into out's o and lse, and into E_*
  for (size_t first = 0; first < precs.size();) {
    // The set: precisions from `first` on that share its scores and dP, as many as the device holds.
    ModelSet S;
    size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    ModelDev probe{};
    probe.p = p, probe.dv = dv;
    const int cap = int(std::clamp(double(free_b) * 0.4 / prec_bytes, 1.0, double(max_shared(probe))));
    std::vector<size_t> members{first};
    for (size_t x = first + 1; x < precs.size() && int(members.size()) < cap; ++x) {
      if (!shares_pairs(*consts[first], *consts[x])) break;
      members.push_back(x);
    }
    first += members.size();
    ++tm.sets;
    std::vector<std::unique_ptr<PrecDev>> bufs;
    S.n = int(members.size());
    for (int t = 0; t < S.n; ++t) {
      bufs.push_back(std::make_unique<PrecDev>());
      S.m[t] = model_of(*consts[members[size_t(t)]], *bufs.back());
    }
    // Persistent warps: enough to fill the device, as many as the scratch budget allows.
    const int64_t stride = scratch_stride(S);
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    const double budget = std::min(double(free_b) * 0.5, double(int64_t(8) << 30));
    const int64_t fit = int64_t(budget / (double(stride) * sizeof(double)));
    const int64_t blocks = forward_blocks(S.m[0], fit);
    if (blocks < 1) throw std::runtime_error("GPU error model: not enough device memory for one block's scratch");
    DevArray<double> scratch{size_t(blocks * warps_per_block() * stride)};
    for (int t = 0; t < S.n; ++t)
      S.m[t].scratch = scratch.p, S.m[t].scratch_warps = blocks * warps_per_block(), S.m[t].scratch_stride = stride;

    timed(tm.forward, [&] { launch_forward(S); });
    for (int t = 0; t < S.n; ++t, ++folded_o) {  // o's and lse's last rounding; their bounds stay for the backward
      const size_t x = members[size_t(t)];
      launch_finish_o(S.m[t], finish_of(consts[x]->ar.soft, precs[x], *consts[x]), o_max.p, lse_max.p, folded_o == 0);
    }
    if (!bwd) continue;
    timed(tm.backward_rows, [&] { launch_backward_rows(S); });
    timed(tm.backward_keys, [&] { launch_backward_keys(S); });
    for (int t = 0; t < S.n; ++t, ++folded_grads) {
      const size_t x = members[size_t(t)];
      const model::Consts& kc = *consts[x];
      const double scale = std::fabs(p.scale);
      const GradConsts k{scale, kc.ftz ? kc.floor_s : 0.0, std::max(1.0, scale), kc.delta_out};
      // This precision's errors before the last rounding, kept elementwise largest over the precisions
      // (NaN kept) where they round alike; else each rounded and the largest bound kept.
      launch_finish_grads(S.m[t], g, k, E_dq->p, E_dk->p, E_dv->p, !defer || folded_grads == 0);
      if (!defer)
        launch_round_grads(S.m[t], g, finish_of(kc.ar.soft, precs[x], kc), E_dq->p, E_dk->p, E_dv->p, B_dq->p, B_dk->p,
                           B_dv->p, folded_grads == 0);
    }
  }
  out.o = download(o_max.p, n_o), out.lse = download(lse_max.p, size_t(rows));
  if (bwd) {
    if (defer) {  // rounded once, at the largest error (the rounding is non-decreasing in it), in place
      ModelDev base{};
      base.p = p, base.dv = dv, base.live = live.p;
      launch_round_grads(base, g, finish_of(precs.front().ar.soft, precs.front(), *consts.front()), E_dq->p, E_dk->p,
                         E_dv->p, E_dq->p, E_dk->p, E_dv->p, true);
    }
    const DevArray<double>&b_dq = defer ? *E_dq : *B_dq, &b_dk = defer ? *E_dk : *B_dk, &b_dv = defer ? *E_dv : *B_dv;
    out.d_q = download(b_dq.p, n_dq), out.d_k = download(b_dk.p, n_dk), out.d_v = download(b_dv.p, n_dv);
  }
  tm.total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (timing) *timing = tm;
  return out;
}

}  // namespace fc::ref::gpu
