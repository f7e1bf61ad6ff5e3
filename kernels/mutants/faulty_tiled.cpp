// The fault-parameterised FA2 emulation (see faulty_tiled.hpp). Storage values are read exactly
// into float (every fp16/bf16/fp32 value is a float), accumulated in float, rounded to storage once
// on the way out. With TiledFault::None it computes what cpu_tiled computes in FA2 order.
#include "kernels/mutants/faulty_tiled.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "contract/rules.h"

namespace fc::mutants {
namespace {

std::atomic<uint64_t> racy_calls{0};  // TiledFault::RacyDq: each call sums its tiles in another order

struct Expf {
  float operator()(float x) const { return std::exp(x); }
};
struct Logf {
  float operator()(float x) const { return std::log(x); }
};

// TiledFault::FastLog: a fast log whose absolute error near 1 is 2^-22, biased low (log(1) < 0).
struct FastLogf {
  float operator()(float x) const { return std::log(x) - 0x1p-22f; }
};

// a + b rounded toward -inf (TiledFault::AccRoundDown): the float nearest the exact sum, one step down
// when that went up (the exact sum of two floats is a double).
float add_down(float a, float b) {
  const double exact = double(a) + double(b);
  const float r = float(exact);
  return double(r) > exact ? std::nextafter(r, -INFINITY) : r;
}

std::vector<float> widen(const HostTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[size_t(i)] = float(t.get(i));
  return out;
}

// The planted faults that change which keys a row sees or which kv head it reads.
Mask effective_mask(TiledFault f, Mask m) {
  if (f != TiledFault::OtherCausal) return m;
  if (m == Mask::CausalTopLeft) return Mask::CausalBottomRight;
  if (m == Mask::CausalBottomRight) return Mask::CausalTopLeft;
  return m;
}
int64_t kv_of(TiledFault f, const Problem& p, int64_t h) {
  return f == TiledFault::GqaModulo ? h % p.heads_kv : kv_head(p, int32_t(h));
}
float score_scale(TiledFault f, const Problem& p) {
  return f == TiledFault::ScaleTwice ? float(p.scale * p.scale) : float(p.scale);
}
// Keys row i processes: its visible prefix, cut at the last full tile when that fault is planted.
int64_t keys_end(TiledFault f, const Problem& p, int64_t i, int64_t block_n) {
  int64_t end = n_visible(effective_mask(f, p.mask), i, p.n_q, p.n_k);
  if (f == TiledFault::DropLastPartialTile && p.n_k % block_n != 0) end = std::min(end, p.n_k / block_n * block_n);
  return end;
}
float dot(const float* a, const float* b, int64_t d) {
  float acc = 0;
  for (int64_t c = 0; c < d; ++c) acc += a[c] * b[c];
  return acc;
}
int64_t block_n_of(const Config& cfg) { return cfg.block_n > 0 ? cfg.block_n : kDefaultBlock; }

// The fault-free kernel's arithmetic (every mutant declares it: the fault is what the suite must
// find): FA2 with one running fp32 <l, o> per row rescaled per key tile, every other sum one fp32
// accumulator in loop order; products exact for 16-bit storage.
Arithmetic faulty_arithmetic(const Problem& p, const Config& cfg) {
  const bool exact = p.dtype != DType::F32;
  Arithmetic a;
  declare_glibc_libm(a);
  a.s = a.d_o_o = a.dp = a.dq = a.dkv = a.pv = serial_chain(DType::F32, exact);
  a.l = serial_chain(DType::F32, true);
  a.pv.block = a.l.block = int32_t(block_n_of(cfg));
  a.pv.merge = a.l.merge = Merge::Rescale;
  return a;
}

}  // namespace

void faulty_forward(TiledFault f, const Problem& p, const Config& cfg, const HostTensor& q_t, const HostTensor& k_t,
                    const HostTensor& v_t, HostTensor& o_t, HostTensor& lse_t) {
  const std::vector<float> q = widen(q_t), k = widen(k_t), v = widen(v_t);  // storage layouts
  const int64_t d = p.d, bn = block_n_of(cfg), bm = cfg.block_m > 0 ? cfg.block_m : int64_t(kDefaultBlock);
  const DType p_type = f == TiledFault::PBf16 ? DType::BF16 : p.dtype;
  const float scale = score_scale(f, p), scale_ulp = std::nextafter(scale, INFINITY);
  const Expf exp_fn;
  auto weight = [&](float x) { return f == TiledFault::ExpEarlyOut && x < -60.0f ? 0.0f : exp_fn(x); };
  std::vector<float> acc(static_cast<size_t>(d)), q_s(static_cast<size_t>(d)),
      s(static_cast<size_t>(bn));  // (d) unnormalised o; (d) scale q_i; (kBlockN) score tile row
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const int64_t g = kv_of(f, p, h), end = keys_end(f, p, i, bn);
        const float* q_i = &q[size_t(offset_q(p, b, h, i))];  // (d)
        for (int64_t c = 0; c < d; ++c) q_s[size_t(c)] = scale * q_i[c];
        // TiledFault::TailRowsPrescaled: the last partial query tile takes another path, q scaled
        // before the dot product.
        const bool tail_row = f == TiledFault::TailRowsPrescaled && i >= p.n_q / bm * bm;
        auto score = [&](int64_t j) {
          const float* k_j = &k[size_t(offset_kv(p, b, g, j))];  // (d)
          // TiledFault::TailKeysScale: the last partial key tile's scale is one ulp off (an approximate
          // rsqrt in the boundary path where the main path divides).
          if (f == TiledFault::TailKeysScale && j >= p.n_k / bn * bn) return dot(q_i, k_j, d) * scale_ulp;
          return tail_row ? dot(q_s.data(), k_j, d) : dot(q_i, k_j, d) * scale;
        };
        float m = rules::neg_inf<float>(), m_first = m, l = 0;
        Eigen::half l16(0.0f);  // the fp16 running sum of TiledFault::Fp16RunningSum
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j0 = 0; j0 < end; j0 += bn) {
          const int64_t j1 = std::min(j0 + bn, end);
          // TiledFault::AdditiveMask: the tile's masked keys take part too, with score s - 10^4.
          const int64_t j_end = f == TiledFault::AdditiveMask ? std::min<int64_t>(j0 + bn, p.n_k) : j1;
          float m_new = m;
          for (int64_t j = j0; j < j_end; ++j) {
            s[size_t(j - j0)] = j < j1 ? score(j) : score(j) - 1e4f;
            m_new = rules::running_max(m_new, s[size_t(j - j0)]);
          }
          if (f == TiledFault::MaxInStorage && std::isfinite(m_new)) m_new = float(round_to(p.dtype, double(m_new)));
          if (j0 == 0) m_first = m_new;
          // exp(m_old - m_new) re-denominates l and o (0, not NaN, before anything was seen);
          // without max subtraction nothing is ever re-denominated.
          const float alpha = f == TiledFault::NoMaxSub ? 1.0f : rules::rescale(m, m_new, exp_fn);
          const float shift = f == TiledFault::NoMaxSub ? 0.0f : rules::safe_shift(m_new);
          // TiledFault::UnderflowForgetsL: an early-out for a rescale that underflowed skips l.
          const bool forget_l = f == TiledFault::UnderflowForgetsL && alpha == 0.0f && std::isfinite(m);
          if (f != TiledFault::NoLRescale && !forget_l) l *= alpha, l16 = Eigen::half(float(l16) * alpha);
          if (f != TiledFault::NoORescale)
            for (float& a : acc) a *= alpha;
          for (int64_t j = j0; j < j_end; ++j) {
            const float pr = weight(s[size_t(j - j0)] - shift);
            l += pr, l16 = Eigen::half(float(l16) + pr);
            // P rounded to storage before P.V, as a GPU kernel feeds its MMA.
            const float p_op = float(round_to(p_type, double(pr)));
            const float* v_j = &v[size_t(offset_kv(p, b, g, j))];  // (d)
            for (int64_t c = 0; c < d; ++c)
              acc[size_t(c)] = f == TiledFault::AccRoundDown ? add_down(acc[size_t(c)], p_op * v_j[c])
                                                             : acc[size_t(c)] + p_op * v_j[c];
          }
          m = m_new;
        }
        if (f == TiledFault::Fp16RunningSum) l = float(l16);
        // l = 0 (no visible key): o = 0 and lse = -inf, unless the guard is the planted fault.
        const float inv = f == TiledFault::MaskedRowNaN ? 1.0f / l : rules::inv_l(l);
        for (int64_t c = 0; c < d; ++c) {
          const float a =
              f == TiledFault::AccToStorage ? float(round_to(p.dtype, double(acc[size_t(c)]))) : acc[size_t(c)];
          o_t.set(offset_q(p, b, h, i) + c, double(a * inv));
        }
        const float m_lse = f == TiledFault::LseFirstTileMax ? m_first : m;
        const float lse = f == TiledFault::FastLog ? rules::finalize_lse(m_lse, l, FastLogf{})
                                                   : rules::finalize_lse(m_lse, l, Logf{});
        lse_t.set(offset_lse(p, b, h, i), double(lse));
      }
}

void faulty_backward(TiledFault f, const Problem& p, const Config& cfg, const HostTensor& q_t, const HostTensor& k_t,
                     const HostTensor& v_t, const HostTensor& o_t, const HostTensor& lse_t, const HostTensor& d_o_t,
                     HostTensor& d_q_t, HostTensor& d_k_t, HostTensor& d_v_t) {
  const std::vector<float> q = widen(q_t), k = widen(k_t), v = widen(v_t), o = widen(o_t), d_o = widen(d_o_t);
  const int64_t d = p.d, bn = block_n_of(cfg);
  const float scale = score_scale(f, p), out_scale = float(p.scale);
  const Expf exp_fn;
  std::vector<float> dq(static_cast<size_t>(numel_q(p)), 0.0f);                       // (batch, heads_q, n_q, d)
  std::vector<float> dk(static_cast<size_t>(numel_kv(p)), 0.0f);                      // (batch, heads_kv, n_k, d)
  std::vector<float> dv(static_cast<size_t>(numel_kv(p)), 0.0f);                      // (batch, heads_kv, n_k, d)
  std::vector<float> dq_tiles(static_cast<size_t>((p.n_k + bn - 1) / bn * d), 0.0f);  // (key tiles, d): RacyDq
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < p.n_q; ++i) {
        const int64_t g = kv_of(f, p, h), end = keys_end(f, p, i, bn), oq = offset_q(p, b, h, i);
        const float lse = float(lse_t.get(offset_lse(p, b, h, i)));
        // D_i = d_o_i . o_i; the planted fault reads row i of v (clamped) instead of o.
        const float* D_src =
            f == TiledFault::DFromV ? &v[size_t(offset_kv(p, b, g, std::min<int64_t>(i, p.n_k - 1)))] : &o[size_t(oq)];
        const float D = dot(&d_o[size_t(oq)], D_src, d);
        // The planted fault walks the whole key tiles the row touches, as a tensor-core kernel does,
        // and relies on P = 0 for the masked keys among them: dS = 0 * (dP - D) and dS * k_j are NaN
        // when v_j or k_j is not finite, though row i cannot see key j.
        const int64_t walk = f == TiledFault::MaskedProducts ? std::min<int64_t>(p.n_k, (end + bn - 1) / bn * bn) : end;
        for (int64_t j = 0; j < walk; ++j) {
          const int64_t okv = offset_kv(p, b, g, j);
          const float s = dot(&q[size_t(oq)], &k[size_t(okv)], d) * scale;
          // P resurrected from lse: 0, not exp(-inf - -inf), on a row that saw nothing...
          const float pr = j >= end ? 0.0f  // a masked key of the walked tile (TiledFault::MaskedProducts)
                           : f == TiledFault::MaskedRowNaN ? exp_fn(s - lse)
                                                           : rules::recompute_p(s, lse, exp_fn);
          const float dp = dot(&d_o[size_t(oq)], &v[size_t(okv)], d);
          const float ds = pr * (dp - D);  // dP - D: one rounding, both in fp32
          // P and dS rounded to storage before the GEMMs they feed.
          const float p_op = float(round_to(p.dtype, double(pr)));
          const float ds_op = float(round_to(p.dtype, double(ds)));
          float* dq_to = f == TiledFault::RacyDq ? &dq_tiles[size_t((j / bn) * d)] : &dq[size_t(oq)];
          for (int64_t c = 0; c < d; ++c) {
            dv[size_t(okv + c)] += p_op * d_o[size_t(oq + c)];
            dk[size_t(okv + c)] += ds_op * q[size_t(oq + c)];
            dq_to[c] += ds_op * k[size_t(okv + c)];
          }
        }
        if (f == TiledFault::RacyDq) {  // the key tiles' partial d_q land in the order they "finish"
          const int64_t tiles = (walk + bn - 1) / bn;
          const bool reversed = racy_calls.fetch_add(1) % 2 == 1;
          for (int64_t t = 0; t < tiles; ++t) {
            const int64_t tile = reversed ? tiles - 1 - t : t;
            for (int64_t c = 0; c < d; ++c) dq[size_t(oq + c)] += dq_tiles[size_t(tile * d + c)];
          }
          std::fill(dq_tiles.begin(), dq_tiles.end(), 0.0f);
        }
      }
  const float dk_scale = f == TiledFault::DkNoScale ? 1.0f : out_scale;
  for (int64_t x = 0; x < numel_q(p); ++x) d_q_t.set(x, double(dq[size_t(x)] * out_scale));
  for (int64_t x = 0; x < numel_kv(p); ++x) {
    d_k_t.set(x, double(dk[size_t(x)] * dk_scale));
    d_v_t.set(x, double(dv[size_t(x)]));
  }
}

Kernel make_faulty_kernel(TiledFault f, const std::string& name, const std::string& description) {
  Kernel kern;
  KernelInfo& info = kern.info;
  info.name = name;
  info.device = "cpu";
  info.mutant = f != TiledFault::None;
  info.description = description;
  info.dtypes = {DType::F16, DType::BF16, DType::F32};
  info.masks = {Mask::None, Mask::CausalTopLeft, Mask::CausalBottomRight};
  info.backward = true;
  info.any_tile = true;
  info.configs = {Config{kDefaultBlock, kDefaultBlock}, Config{4, 8}, Config{8, 3}};
  info.arithmetic = faulty_arithmetic;
  // What the FA2 emulation computes the same way on two runs (the faults break one of them).
  info.exact = {.rows = true,
                .d_q_rows = f != TiledFault::RacyDq,
                .shared_scores = true,
                .tile_weights = true,
                .exact_scores = true};
  kern.supports = [](const Problem&) { return true; };
  kern.forward = [f](const Inputs& in, const Config& c, Outputs& out) {
    faulty_forward(f, in.p, c, in.q, in.k, in.v, out.o, out.lse);
  };
  kern.backward = [f](const Inputs& in, const Config& c, Outputs& out) {
    faulty_backward(f, in.p, c, in.q, in.k, in.v, out.o, out.lse, in.d_o, out.d_q, out.d_k, out.d_v);
  };
  return kern;
}

}  // namespace fc::mutants
