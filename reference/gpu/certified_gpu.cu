// The certified oracle on the GPU (certified_gpu.hpp). Derivation: docs/error-model.md, "The certified
// oracle on the GPU"; the names below (eps, δ, θ, λ, κ, γ_o, ...) are that section's.
//
// Every score is an Ogita–Rump–Oishi Dot2 kept unevaluated (s = sh + sl, |error| <= 2γ(d)²Σ|q_l k_l|
// plus underflow floors), so the exponent argument x = s - m is split exactly (TwoSum) as on the CPU;
// every long sum runs in chunks of 256 terms (γ(min(n,256) + chunks) as the CPU's chunked_product);
// every bound is carried alongside its value in the same loop, elementwise (Σ_j w_ij |b_jk|, not the
// CPU's Cauchy–Schwarz form).
// Three kernels, none with atomics (results are the same bits on every run):
//   forward_rows   R rows per block, keys in tiles of TK: pass 1 the row max and score bounds
//                  (reduced across a warp: no order), pass 2 weights, l (Sum2, one thread per row in
//                  key order, in registers), o and o_mag;
//   dq_rows        R rows per block: D (Dot2), then per key dP (Dot2), dS and its bound e, d_q;
//   dkv_keys       KT keys per block over every row of the group (GQA heads stacked): d_k and d_v.
// Every sum runs in a fixed order (keys, or rows, ascending; a new partial at each multiple of 256), so
// the bits do not depend on the tiles: the tile sizes are a schedule (shared memory, threads per pair),
// chosen per head dim. Each thread keeps the output elements it accumulates in registers (kRowPer or
// kKeyPer of them), so that the shared memory of two blocks fits one multiprocessor. Where every input is
// a float value (the 16- and 32-bit dtypes), the products q_l k_l and d_o_l v_l are exact in float64 and
// TwoProd's error term is 0: the kernels instantiated with Exact leave it out (the same bits, two
// operations fewer per term), and where a dot product's partial sums are all doubles (dot_float: the
// rows' quanta show it) they run it as a plain sum, which is Dot2's result bit for bit; on a device with
// float64 tensor cores those plain sums are taken for a tile's pairs at once (tensor_dots.cuh), the same
// bits again (dot_float).
// The library is compiled with --fmad=false: every written operation rounds once (fma only where
// written: __fma_rn).
#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/gpu/certified_gpu.hpp"
#include "reference/gpu/tensor_dots.cuh"

namespace fc::ref::gpu {
namespace {

constexpr double kU = 0x1p-53;
constexpr double kSlack = 1.0 + 0x1p-30;  // the rounding of each bound's own evaluation
constexpr double kLibmRel = 0x1p-51;      // CUDA's exp and log: documented 1 ulp, charged 2
constexpr double kTanhRel = 0x1p-50;      // CUDA's tanh: documented 1 ulp, charged 4 (of a result below 1)
constexpr double kDropBelow = -700.0;
constexpr double kDroppedWeight = 0x1p-1008;  // > exp(-699)
constexpr double kTiny = 0x1p-1074;           // the smallest subnormal
constexpr int kMaxExp = 500;                  // inputs below 2^500 in magnitude
constexpr int kChunk = 256;
constexpr int kThreads = 256;
constexpr int kRows = 8;      // R: rows per block of forward_rows and dq_rows
constexpr int kMaxTK = 32;    // keys per tile of the row kernels: 32, 16 or 8 (keys_per_tile)
static_assert(kRows * 8 % 32 == 0 && kRows * kMaxTK <= kThreads, "forward_rows: a pair per thread, whole warps");
static_assert(kRows % 8 == 0 && kThreads % 32 == 0, "tile_dots: rows in blocks of 8, whole warps");
constexpr int kMaxRowT = 32;  // rows per tile of dkv_keys: 32, 16 or 8 (Dev::rt)
constexpr int kMaxKeyT = 8;   // keys per block of dkv_keys: 8, 4 or 2 (Dev::kt)
constexpr int kMaxHeadDim = 256;
// Output elements a thread accumulates: R rows x d (or d_v) in the row kernels, KT keys x d in dkv_keys
// (KT x max(d, d_v) <= kThreads * kKeyPer, dkv_tiles).
constexpr int kRowPer = kRows * kMaxHeadDim / kThreads;
constexpr int kKeyPer = 4;
// Rows past these score bounds leave the GPU's domain (the CPU's MPFR path: certified.cpp kMpAbove).
constexpr double kEpsMax = 0x1p-56;
constexpr double kEpsMaxCapped = 0x1p-30;  // under softcap (certified.cpp kMpAboveCapped): tanh's own error
constexpr double kSlMax = 0x1p-30;
constexpr int kFlagRange = 1;  // a row's scores past the domain
constexpr size_t kSmemBudget = 200 * 1024;  // bytes of shared memory per block (the H200 allows 227 KiB)

__host__ __device__ inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
// The larger of a and b with -0 < +0 and NaN ignored: the maximum of a set in whatever order it is taken.
__device__ inline double max_total(double a, double b) {
  if (isnan(b)) return a;
  if (isnan(a)) return b;
  return a > b || (a == b && !signbit(a)) ? a : b;
}
__host__ __device__ inline double gamma_n(double n) { return n * kU / (1.0 - n * kU); }
// The chunked sums' γ: min(n, 256) roundings inside a chunk (the product's and the chunk's additions),
// one per chunk added to the total, `extra` more after it.
__host__ __device__ inline double chunk_gamma(int64_t n, int extra) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  return gamma_n(double((n < kChunk ? n : kChunk) + chunks + extra));
}

__device__ inline void two_sum(double a, double b, double& s, double& e) {
  s = a + b;
  const double bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}
__device__ inline void two_prod(double a, double b, double& p, double& e) {
  p = a * b;
  e = __fma_rn(a, b, -p);
}

// Dot2 of x and y (n terms) kept unevaluated: x·y = hi + lo to within dot_err(n, abs) (abs: the computed
// Σ|x_l y_l|). The error terms of TwoProd and TwoSum sum to at most γ(n)(1+u)Σ|x y|, and their own sum lo
// rounds each of them at most n times: γ(n)²(1+u)Σ|xy| <= 2γ(n)² abs (abs >= (1 - γ(n))Σ|xy|); products
// that underflow lose at most 2^-1075 each in TwoProd and in abs.
// Exact: every x_l y_l is exact in float64 (float inputs), so TwoProd's error qe is +0 and c + (qe + r)
// is c + r bit for bit (c is never -0: it starts at +0, and a rounded sum is -0 only of two -0s).
template <bool Exact = false>
__device__ inline void dot2(const double* x, const double* y, int n, double& hi, double& lo, double& abs) {
  double p = 0, c = 0, a = 0;
  for (int l = 0; l < n; ++l) {
    double h, r;
    if constexpr (Exact) {
      h = x[l] * y[l];
      two_sum(p, h, p, r);
      c = c + r;
    } else {
      double qe;
      two_prod(x[l], y[l], h, qe);
      two_sum(p, h, p, r);
      c = c + (qe + r);
    }
    a = a + fabs(h);
  }
  hi = p, lo = c, abs = a;
}
__device__ inline double dot_err(int n, double abs) {
  const double g = gamma_n(n);
  return 2 * g * g * abs + (2.0 * n + 2) * kTiny;
}

// A vector's quantum: the largest 2^e of which every element is an integer multiple (the lowest set bit
// over its elements), as e; kNoQuantum for a vector of zeros. quantum_exp(x): one element's.
constexpr int kNoQuantum = 1 << 20;
__device__ inline int quantum_exp(double x) {
  if (x == 0) return kNoQuantum;
  const uint64_t bits = uint64_t(__double_as_longlong(x));
  const int e = int((bits >> 52) & 0x7ff);
  const uint64_t m = (bits & ((uint64_t(1) << 52) - 1)) | (e ? uint64_t(1) << 52 : 0);
  return (e ? e - 1075 : -1074) + (__ffsll((long long)m) - 1);  // |x| = m 2^(e - 1075), m's trailing zeros
}
__global__ void row_quanta(const double* x, int64_t rows, int width, int* out) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  int qe = kNoQuantum;
  for (int l = 0; l < width; ++l) qe = min(qe, quantum_exp(x[r * width + l]));
  out[r] = qe;
}

// Dot2 of float values x and y whose quanta multiply to 2^q (q: the two vectors' exponents summed, at
// least -298 for float values):
// every product x_l y_l is exact and a multiple of 2^q, and so is every partial sum. When Σ|x_l y_l| <=
// 2^(53 + q), every partial sum is a double: no addition rounds, each TwoSum error is +0, and Dot2's
// (hi, lo, abs) are the plain sum's (p, +0, a) bit for bit; a, computed, is at least (1 - γ(n)) Σ|x y|,
// so a (1 + 2^-40) <= 2^(53 + q) shows it (γ(256) < 2^-45). Otherwise Dot2 itself. The same bits
// either way, with a third of Dot2's operations on the common path.
// pre: where not null, (p, a) from the float64 tensor cores (tensor_dots.cuh). Under the test every
// product and every sum of some of them is a multiple of 2^q below 2^(53+q) in magnitude, a double: no
// step of a matrix instruction rounds, whatever its internal order, and its p and a are the loop's bits
// (+0 for a sum of zeros, round to nearest). Where the test fails the exact Σ|x_l y_l| exceeds
// 2^(53+q), so an a taken in any order, each step within an ulp, fails it too, and Dot2 runs. So the
// tensor cores change no bit.
__device__ inline void dot_float(const double* x, const double* y, int n, int q, double& hi, double& lo, double& abs,
                                 const double* pre = nullptr) {
  double p = 0, a = 0;
  if (pre) {
    p = pre[0], a = pre[1];
  } else {
    for (int l = 0; l < n; ++l) {
      const double h = x[l] * y[l];
      p = p + h;
      a = a + fabs(h);
    }
  }
  // (A vector of zeros: q past 2^19, the test 0 <= 2^1023; p = +0, as Dot2's, from +-0 products.)
  if (a * (1 + 0x1p-40) <= ldexp(1.0, min(53 + q, 1023))) {
    hi = p, lo = 0, abs = a;
    return;
  }
  dot2<true>(x, y, n, hi, lo, abs);
}
// The Dot2 of the kernels: dot_float where every input is a float value (Exact), else Dot2 with TwoProd.
template <bool Exact>
__device__ inline void dot_inputs(const double* x, const double* y, int n, int q, double& hi, double& lo, double& abs,
                                  const double* pre = nullptr) {
  if constexpr (Exact)
    dot_float(x, y, n, q, hi, lo, abs, pre);
  else
    dot2<false>(x, y, n, hi, lo, abs);
}

struct Dev {
  Problem p;
  Seqs s;  // device pointers
  const double *q, *k, *v, *d_o;
  const int *qq, *kq, *vq, *doq;  // each row's quantum exponent (row_quanta; float inputs only, else null)
  double *o, *o_err, *o_mag, *lse, *lse_err;
  double *dq, *dq_err, *dk, *dk_err, *dvg, *dvg_err;  // the gradients (dvg: d_v)
  double* stat;  // (groups, m_max, kStat)
  int* flag;
  const double *slopes, *sinks;     // (heads_q): ALiBi's slopes, the sinks' logits (finite or -inf); or null
  const double *mask, *block_mask;  // the mask tensor (bool as 0/1) and the block mask (0/1); or null
  int64_t mshape[4], bshape[4];     // their shapes (B_m, H_m, rows, cols)
  int64_t m_max;        // rows of the largest group: g · n_q
  int64_t row_tiles;    // ceil(m_max / kRows)
  int64_t key_tiles;    // ceil(n_k / kt)
  int g;                // query heads per kv head
  int tk;               // keys per tile of the row kernels
  int kt, rt;           // keys per block and rows per tile of dkv_keys
  int d, dv;
  bool mma;             // dot_float's sums on the tensor cores (the same bits)
};

// The row of d_k and d_v the key j of group (b, h_kv) writes: the tensor's own row (kv_row), or with
// paged K/V its compact row (j after the keys of the sequences before b, times heads_kv, plus h_kv),
// which the host adds into the pages afterwards (certified(): a physical row two sequences share
// gets the sum of both keys' gradients, as on the CPU).
__device__ inline int64_t grad_kv_row(const Dev& D, int64_t b, int64_t h_kv, int64_t j) {
  if (D.p.page_size == 0) return kv_row(D.p, D.s, b, h_kv, j);
  const int64_t before = D.p.varlen ? int64_t(D.s.cu_k[b]) : b * D.p.n_k;
  return (before + j) * D.p.heads_kv + h_kv;
}
enum Stat { kMx = 0, kInvL, kKappa, kTail, kD, kErrD, kEmpty, kStat };

// The visible keys [j0, j1) of query i (reference/visibility.hpp's definitions: mask, then window).
__device__ inline void key_range(const Problem& p, int64_t i, int64_t n_q, int64_t n_k, int64_t& j0, int64_t& j1) {
  const int64_t a = p.mask == Mask::CausalTopLeft ? i : (n_k - 1) - (n_q - 1 - i);
  int64_t b = 0, e = n_k;
  if (p.mask == Mask::CausalTopLeft && i + 1 < e) e = i + 1;
  if (p.mask == Mask::CausalBottomRight && n_k - n_q + i + 1 < e) e = n_k - n_q + i + 1;
  if (p.window_right >= 0 && a + p.window_right + 1 < e) e = a + p.window_right + 1;
  if (p.window_left >= 0 && a - p.window_left > b) b = a - p.window_left;
  if (b > n_k) b = n_k;
  if (e < b) e = b;
  j0 = b, j1 = e;
}

// Row r of group (b, h_kv): its query head and index.
struct RowId {
  int64_t h, i, n_q, n_k;
  bool valid;
};
__device__ inline RowId row_id(const Dev& D, int64_t b, int64_t h_kv, int64_t r) {
  RowId id;
  id.n_q = seq_n_q(D.p, D.s, b);
  id.n_k = seq_n_k(D.p, D.s, b);
  id.valid = id.n_q > 0 && r < int64_t(D.g) * id.n_q;
  id.h = id.valid ? h_kv * D.g + r / id.n_q : 0;
  id.i = id.valid ? r % id.n_q : 0;
  return id;
}

// The score s = scale·q·k as sh + sl and its bound eps (docs: "Scores"). pre: dot_float's.
template <bool Exact>
__device__ inline void score(const double* qr, const double* kr, int d, int qk, double scale, double& sh, double& sl,
                             double& eps, const double* pre) {
  double hi, lo, abs;
  dot_inputs<Exact>(qr, kr, d, qk, hi, lo, abs, pre);
  double e1;
  two_prod(scale, hi, sh, e1);
  const double sc = scale * lo;
  sl = e1 + sc;
  eps = fabs(scale) * dot_err(d, abs) + 1.01 * kU * (fabs(sc) + fabs(sl)) + 4 * kTiny;
}

// The cap's derivative for the backward: ĝ ~ sech²(s/c), with |ĝ - g| <= eg (no softcap: 1 and 0).
struct CapSlope {
  double g = 1, eg = 0;
};

// Softcap on the score sh + sl (bound eps): ŝ = fl(c·tanh(fl(sh/c))), whose error becomes the score's
// (sl = 0), and the slope ĝ = 4w/(1 + w)², w = e^{-2|y|}, with its own bound: the CPU oracle's
// construction (reference/certified_variants.cpp, cap_row) pair by pair, with CUDA's tanh and exp
// charged 4 and 2 ulp (docs: "Softcap on the GPU").
__device__ inline CapSlope soft_cap(double c, double& sh, double& sl, double& eps) {
  const double y = sh / c;
  const double dy = (kU * fabs(y) + (fabs(sl) + eps * kSlack) / c) * 1.01;  // >= |y - s/c|
  const double t = tanh(y), sc = c * t;
  const double z = fabs(y) - dy;  // sech² is largest at the smallest |y| in reach
  const double sech2_max = z > 0 ? fmin(1.0, 4 * exp(-2 * z) * (1 + 0x1p-40)) : 1.0;
  eps = (c * (kTanhRel * fabs(t) * 1.01 + sech2_max * dy) + kU * fabs(sc)) * kSlack;
  sh = sc, sl = 0;
  CapSlope cs;
  if (2 * fabs(y) > 690) {  // w would be subnormal: ĝ = 0, g <= sech2_max
    cs.g = 0, cs.eg = sech2_max * kSlack;
    return cs;
  }
  const double w = exp(-2 * fabs(y)), one_w = 1 + w;
  cs.g = 4 * w / (one_w * one_w);
  cs.eg = ((kLibmRel + 4 * kU) * 1.01 + 2.02 * dy) * kSlack * cs.g;
  return cs;
}

// Element (b, h, r, c) of a mask tensor or block mask of shape sh (B_m, H_m, rows, cols): B_m and
// H_m are 1 or full.
__device__ inline double mask_at(const double* t, const int64_t* sh, int64_t b, int64_t h, int64_t r, int64_t c) {
  const int64_t bm = sh[0] > 1 ? b : 0, hm = sh[1] > 1 ? h : 0;
  return t[((bm * sh[1] + hm) * sh[2] + r) * sh[3] + c];
}

// The score of key j in row (h, i) of sequence b (n_q, n_k its lengths): scale·q·k (score), softcap
// (soft_cap: its slope in *cap), then ALiBi's -slope·|i' - j| and the mask tensor's additive value,
// each added as the CPU oracle adds them (reference/certified_variants.cpp: TwoProd and TwoSum exact,
// the low part's roundings charged to eps). false: a block bit, a boolean bit or an additive -inf hides
// the key (weight exactly 0). pre: q·k's (p, a) from the tensor cores, or null (dot_float).
template <bool Exact>
__device__ inline bool biased_score(const Dev& D, const double* qr, const double* kr, int qk, int64_t b, int64_t h,
                                    int64_t i, int64_t n_q, int64_t n_k, int64_t j, double& sh, double& sl, double& eps,
                                    const double* pre, CapSlope* cap = nullptr) {
  const Problem& p = D.p;
  double x = 0;  // the additive value
  if (p.block_q > 0 && mask_at(D.block_mask, D.bshape, b, h, i / p.block_q, j / p.block_k) == 0) return false;
  if (p.mask_kind != MaskKind::None) {
    x = mask_at(D.mask, D.mshape, b, h, i, j);
    if (p.mask_kind == MaskKind::Bool) {
      if (x == 0) return false;
      x = 0;
    } else if (x == -INFINITY) {
      return false;
    }
  }
  score<Exact>(qr, kr, p.d, qk, p.scale, sh, sl, eps, pre);
  if (p.softcap > 0) {
    const CapSlope cs = soft_cap(p.softcap, sh, sl, eps);
    if (cap) *cap = cs;
  }
  if (p.alibi) {
    double ph, pl, t, e;
    two_prod(D.slopes[h], double(alibi_distance(p.mask, i, j, n_q, n_k)), ph, pl);  // exact: 24 + 31 bits
    two_sum(sh, -ph, t, e);                                                         // exact
    eps += 2.01 * kU * (fabs(sl) + fabs(e) + fabs(pl));
    sh = t, sl = (sl + e) - pl;  // two roundings
  }
  if (x != 0) {
    double t, e;
    two_sum(sh, x, t, e);  // exact
    eps += 2.01 * kU * (fabs(sl) + fabs(e));
    sh = t, sl = sl + e;  // one rounding
  }
  return true;
}

// p̃ = exp(xh)(1 + xl), x = sh - mx split exactly; 0 (and *dropped) below e^-700.
__device__ inline double weight(double sh, double sl, double mx, double& xl, bool& dropped) {
  double xh, xe;
  two_sum(sh, -mx, xh, xe);
  dropped = xh < kDropBelow;
  if (dropped) {
    xl = 0;
    return 0.0;
  }
  xl = xe + sl;
  return exp(xh) * (1.0 + xl);
}

__device__ inline const double* row_ptr(const double* base, int64_t row, int width) { return base + row * width; }

// Loads n rows of `width` from global rows (given by row_of(t)) into smem rows `width + 1` apart (zero
// past `count`): an odd pitch, so that threads reading one element of different rows hit different banks.
template <class RowOf>
__device__ inline void load_rows(double* dst, const double* src, int n, int count, int width, RowOf row_of) {
  for (int idx = threadIdx.x; idx < n * width; idx += blockDim.x) {
    const int t = idx / width, l = idx % width;
    dst[t * (width + 1) + l] = t < count ? src[row_of(t) * width + l] : 0.0;
  }
}

// The quanta of the same n rows: kNoQuantum past `count` (rows of zeros), -kNoQuantum without quanta
// (dot_float then always takes Dot2).
template <class RowOf>
__device__ inline void load_quanta(int* dst, const int* src, int n, int count, RowOf row_of) {
  for (int t = threadIdx.x; t < n; t += blockDim.x)
    dst[t] = t >= count ? kNoQuantum : src ? src[row_of(t)] : -kNoQuantum;
}

// ---------------------------------------------------------------------------------------------------
// Forward: R rows per block, two passes over the keys.
template <bool Exact>
__global__ void __launch_bounds__(kThreads, 2) forward_rows(Dev D) {
  extern __shared__ double sm[];
  const int d = D.d, dv = D.dv, TK = D.tk, pd = d + 1, pdv = dv + 1;  // pd, pdv: smem row pitches
  const int64_t group = blockIdx.x / D.row_tiles, tile = blockIdx.x % D.row_tiles;
  const int64_t b = group / D.p.heads_kv, h_kv = group % D.p.heads_kv, r0 = tile * kRows;
  double* q = sm;                   // (R, d), pitch pd
  double* kt = q + kRows * pd;      // (TK, d), pitch pd
  double* vt = kt + TK * pd;        // (TK, dv), pitch pdv
  double* t_sh = vt + TK * pdv;     // (R, TK): pass 1's weights
  double* t_x = t_sh + kRows * TK;  // |xl| (-1: dropped)
  double* vmax = t_x + kRows * TK;  // (dv)
  double* t_pa = vmax + dv;         // (R, TK, 2): the tensor cores' q·k (p, a)
  const bool mma = Exact && kHaveDmma && D.mma;
  // This thread's elements (row, column) of o and o_mag: e-th at threadIdx.x + e·kThreads of the (R, dv)
  // tile; each a chunk's partial (part) and the sum of the chunks before it (tot).
  double o_tot[kRowPer], o_part[kRowPer], m_tot[kRowPer], m_part[kRowPer];
  __shared__ double s_mx[kRows], s_eps[kRows], s_slm[kRows], s_ls[kRows], s_lc[kRows], s_xlm[kRows], s_nd[kRows];
  __shared__ int64_t s_j0[kRows], s_j1[kRows], s_row[kRows], s_h[kRows], s_i[kRows], s_nv[kRows];
  __shared__ int s_bad[kRows];
  __shared__ int s_qe[kRows], t_ke[kMaxTK];  // quanta of the block's q rows and of the tile's keys

  const RowId id0 = row_id(D, b, h_kv, r0);
  const int64_t n_q = id0.n_q, n_k = id0.n_k;
  if (!id0.valid) return;
  if (threadIdx.x < kRows) {
    const int t = threadIdx.x;
    const RowId id = row_id(D, b, h_kv, r0 + t);
    int64_t j0 = 0, j1 = 0;
    if (id.valid) key_range(D.p, id.i, id.n_q, n_k, j0, j1);
    s_j0[t] = j0, s_j1[t] = j1;
    s_row[t] = id.valid ? q_row(D.p, D.s, b, id.h, id.i) : -1;
    s_h[t] = id.h, s_i[t] = id.i, s_nv[t] = 0;  // s_nv: the keys the row sees (the masks' hidden ones not)
    s_mx[t] = -INFINITY, s_eps[t] = 0, s_slm[t] = 0, s_ls[t] = 0, s_lc[t] = 0, s_xlm[t] = 0, s_nd[t] = 0;
    s_bad[t] = 0;
  }
#pragma unroll
  for (int e = 0; e < kRowPer; ++e) o_tot[e] = o_part[e] = m_tot[e] = m_part[e] = 0;
  for (int l = threadIdx.x; l < dv; l += blockDim.x) vmax[l] = 0;
  __syncthreads();
  load_rows(q, D.q, kRows, kRows, d, [&](int t) { return s_row[t] < 0 ? int64_t(0) : s_row[t]; });
  load_quanta(s_qe, D.qq, kRows, kRows, [&](int t) { return s_row[t] < 0 ? int64_t(0) : s_row[t]; });
  int64_t lo = n_k, hi = 0;  // the keys any row of the block sees
  for (int t = 0; t < kRows; ++t)
    if (s_row[t] >= 0 && s_j1[t] > s_j0[t]) lo = imin(lo, s_j0[t]), hi = imax(hi, s_j1[t]);
  const int64_t t_first = lo / TK * TK;
  __syncthreads();
  // Row threadIdx.x's l (Sum2: r_ls + r_lc), its largest |xl| and its dropped weights, kept by that
  // thread (threadIdx.x < kRows) in registers over pass 1's tiles.
  const int64_t my_row = threadIdx.x < kRows ? s_row[threadIdx.x] : -1;
  const int64_t my_j0 = threadIdx.x < kRows ? s_j0[threadIdx.x] : 0,
                my_j1 = threadIdx.x < kRows ? s_j1[threadIdx.x] : 0;
  double r_ls = 0, r_lc = 0, r_xlm = 0, r_nd = 0;

  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t t0 = t_first; t0 < hi; t0 += TK) {
      const int cnt = int(imin(TK, n_k - t0));
      load_rows(kt, D.k, TK, cnt, d, [&](int t) { return kv_row(D.p, D.s, b, h_kv, t0 + t); });
      load_quanta(t_ke, D.kq, TK, cnt, [&](int t) { return kv_row(D.p, D.s, b, h_kv, t0 + t); });
      if (pass == 1) load_rows(vt, D.v, TK, cnt, dv, [&](int t) { return kv_row(D.p, D.s, b, h_kv, t0 + t); });
      __syncthreads();
      if (mma) {
        tile_dots<2>(q, pd, kRows, kt, pd, TK, d, nullptr, t_pa, 2 * TK, 2);
        __syncthreads();
      }
      // One pair per thread (kRows·TK <= kThreads, whole warps: TK divides 32); a row's pairs are TK
      // adjacent lanes of one warp.
      if (threadIdx.x < kRows * TK) {
        const int idx = threadIdx.x, t = idx / TK, jj = idx % TK;
        const int64_t j = t0 + jj;
        double sh = -INFINITY, sl = 0, eps = 0;
        const bool seen = s_row[t] >= 0 && j >= s_j0[t] && j < s_j1[t] &&
                          biased_score<Exact>(D, q + t * pd, kt + jj * pd, s_qe[t] + t_ke[jj], b, s_h[t], s_i[t], n_q,
                                              n_k, j, sh, sl, eps, mma ? t_pa + 2 * idx : nullptr);
        if (pass == 0) {
          // The row's statistics over the keys it sees (the masks' hidden ones not): a count, a flag,
          // maxima, none of which depends on the order, reduced across the row's lanes.
          int64_t nv = seen ? 1 : 0;
          int bad = seen && (!isfinite(sh) || !isfinite(sl));
          double mx = seen ? sh : -INFINITY, em = seen ? eps : 0.0, slm = seen ? fabs(sl) : 0.0;
          for (int off = TK / 2; off > 0; off /= 2) {
            nv += __shfl_xor_sync(0xffffffffu, nv, off);
            bad |= __shfl_xor_sync(0xffffffffu, bad, off);
            mx = max_total(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            em = fmax(em, __shfl_xor_sync(0xffffffffu, em, off));
            slm = fmax(slm, __shfl_xor_sync(0xffffffffu, slm, off));
          }
          if (jj == 0) {
            s_nv[t] += nv, s_bad[t] |= bad;
            s_mx[t] = max_total(s_mx[t], mx), s_eps[t] = fmax(s_eps[t], em), s_slm[t] = fmax(s_slm[t], slm);
          }
        } else if (!seen) {  // weight 0, not a dropped one
          t_sh[idx] = 0, t_x[idx] = 0;
        } else {
          double xl;
          bool dropped;
          t_sh[idx] = weight(sh, sl, s_mx[t], xl, dropped);
          t_x[idx] = dropped ? -1.0 : fabs(xl);
        }
      }
      __syncthreads();
      if (pass == 1 && threadIdx.x < kRows && my_row >= 0) {  // l by Sum2 in key order, in registers
        const int t = threadIdx.x;
        for (int jj = 0; jj < TK; ++jj) {
          const int64_t j = t0 + jj;
          if (j < my_j0 || j >= my_j1) continue;
          const int idx = t * TK + jj;
          const double w = t_sh[idx], x = t_x[idx];
          if (x < 0) {
            r_nd += 1;
          } else {  // (a key the masks hide: w = 0, which leaves l's bits as they are)
            double e;
            two_sum(r_ls, w, r_ls, e);  // Sum2
            r_lc += e;
            r_xlm = fmax(r_xlm, x);
          }
        }
      }
      if (pass == 1) {
        const bool flush = t0 % kChunk == 0;
#pragma unroll
        for (int e = 0; e < kRowPer; ++e) {
          const int idx = int(threadIdx.x) + e * kThreads;
          if (idx >= kRows * dv) break;
          const int t = idx / dv, l = idx % dv;
          if (flush) o_tot[e] += o_part[e], m_tot[e] += m_part[e], o_part[e] = 0, m_part[e] = 0;
          double po = o_part[e], pm = m_part[e];
          for (int jj = 0; jj < TK; ++jj) {
            const double w = t_sh[t * TK + jj], x = vt[jj * pdv + l];
            po += w * x;
            pm += w * fabs(x);
          }
          o_part[e] = po, m_part[e] = pm;
          if (t == 0)
            for (int jj = 0; jj < cnt; ++jj) vmax[l] = fmax(vmax[l], fabs(vt[jj * pdv + l]));
        }
      }
      __syncthreads();
    }
    if (pass == 1 && threadIdx.x < kRows) {
      const int t = threadIdx.x;
      s_ls[t] = r_ls, s_lc[t] = r_lc, s_xlm[t] = r_xlm, s_nd[t] = r_nd;
    }
    if (pass == 0 && threadIdx.x < kRows) {
      const int t = threadIdx.x;
      const bool empty = s_row[t] < 0 || s_nv[t] == 0;
      const double eps_max = D.p.softcap > 0 ? kEpsMaxCapped : kEpsMax;
      if (!empty && (s_bad[t] || !(s_eps[t] * kSlack <= eps_max) || !(s_slm[t] <= kSlMax)))
        atomicOr(D.flag, kFlagRange);
      // A sink shifts every weight by the larger of the scores' max and itself (exact: an fp32 logit).
      if (!empty && D.p.sinks) s_mx[t] = fmax(s_mx[t], D.sinks[s_h[t]]);
    }
    __syncthreads();
  }

  // Row statistics, lse and its bound (docs: "Weights", "lse").
  if (threadIdx.x < kRows && s_row[threadIdx.x] >= 0) {
    const int t = threadIdx.x;
    int64_t nv = s_nv[t];
    const RowId id = row_id(D, b, h_kv, r0 + t);
    const int64_t li = lse_index(D.p, D.s, b, id.h, id.i);
    double* st = D.stat + (group * D.m_max + r0 + t) * kStat;
    const double sink = D.p.sinks ? D.sinks[id.h] : -INFINITY;
    if (nv == 0) {  // o = 0, lse = the sink (-inf without one), exactly
      D.lse[li] = sink, D.lse_err[li] = 0;
      st[kMx] = 0, st[kInvL] = 0, st[kKappa] = 0, st[kTail] = 0, st[kEmpty] = 1;
    } else {
      if (isfinite(sink)) {  // one more weight of l, with no value (its x = sink - mx split exactly)
        double xl, e;
        bool dropped;
        const double w = weight(sink, 0.0, s_mx[t], xl, dropped);
        if (dropped) {
          s_nd[t] += 1;
        } else {
          two_sum(s_ls[t], w, s_ls[t], e);
          s_lc[t] += e;
          s_xlm[t] = fmax(s_xlm[t], fabs(xl));
        }
        nv += 1;
      }
      const double l = s_ls[t] + s_lc[t], inv_l = 1.0 / l, xlm = s_xlm[t], eps = s_eps[t] * kSlack;
      const double delta = eps + kU * xlm + xlm * xlm + kLibmRel + 2.01 * kU;
      const double g = gamma_n(double(nv));
      const double theta = kU + g * g;
      const double tail = s_nd[t] * kDroppedWeight;
      const double lambda = 2 * delta + 1.01 * theta + 1.01 * tail + 2.01 * kU;
      const double kappa = lambda * (1 + lambda) * kSlack;
      const double y = log(l), lse = s_mx[t] + y;
      D.lse[li] = lse;
      D.lse_err[li] = (delta + 1.01 * theta + 1.01 * tail + kLibmRel * fabs(y) + 1.01 * kU * fabs(lse) + kTiny) * kSlack;
      st[kMx] = s_mx[t], st[kInvL] = inv_l, st[kKappa] = kappa, st[kTail] = s_nd[t] > 0 ? kDroppedWeight : 0.0;
      st[kEmpty] = 0;
    }
  }
  __syncthreads();
  const double g_o = chunk_gamma(n_k, 1);
#pragma unroll
  for (int e = 0; e < kRowPer; ++e) {
    const int idx = int(threadIdx.x) + e * kThreads;
    if (idx >= kRows * dv) break;
    const int t = idx / dv, l = idx % dv;
    if (s_row[t] < 0) continue;
    const int64_t out = s_row[t] * dv + l;
    const double* st = D.stat + (group * D.m_max + r0 + t) * kStat;
    if (st[kEmpty] != 0) {
      D.o[out] = 0, D.o_err[out] = 0, D.o_mag[out] = 0;
      continue;
    }
    const double inv_l = st[kInvL], kp = st[kKappa] * (1 + st[kKappa]);
    const double o = inv_l * (o_tot[e] + o_part[e]), mag = inv_l * (m_tot[e] + m_part[e]);
    D.o[out] = o;
    D.o_mag[out] = mag;
    D.o_err[out] = ((kp + g_o) * (mag / (1 - g_o)) + s_nd[t] * kDroppedWeight * vmax[l] + kTiny) * kSlack;
  }
}

// ---------------------------------------------------------------------------------------------------
// Backward. One (row, key) pair: P̂, dS and its bound e (docs: "Backward").
struct PairTerms {
  double pr, ds, e;
};
// sh + sl: the pair's score, cap its softcap slope (biased_score); pre: d_o·v's (p, a) from the tensor
// cores, or null.
template <bool Exact>
__device__ inline PairTerms pair(const Dev& D, double sh, double sl, const CapSlope& cap, const double* dor,
                                 const double* vr, int qv, const double* st, const double* pre) {
  double xl;
  bool dropped;
  const double pt = weight(sh, sl, st[kMx], xl, dropped);
  const double pr = pt * st[kInvL];
  double ph, pc, pa;
  dot_inputs<Exact>(dor, vr, D.dv, qv, ph, pc, pa, pre);
  const double dpv = ph + pc;
  const double e_p = 1.01 * kU * fabs(dpv) + dot_err(D.dv, pa);
  const double big_d = st[kD], err_d = st[kErrD], kp = st[kKappa] * (1 + st[kKappa]), tail = st[kTail];
  const double t = dpv - big_d;
  double ds = pr * t;
  double e = pr * ((kp + kU) * (1 + 3 * kU) * fabs(t) + (1 + kp) * (e_p + err_d)) + kU * fabs(ds);
  e += tail * (fabs(dpv) + e_p + fabs(big_d) + err_d);
  if (D.p.softcap > 0) {  // dS times the cap's slope ĝ, |ĝ - g| <= eg
    const double base = ds;
    ds = base * cap.g;
    e = e * (cap.g + cap.eg) + fabs(base) * cap.eg + kU * fabs(ds);
  }
  return {pr, ds, e + kTiny};
}

// d_q: R rows per block; D first.
template <bool Exact>
__global__ void __launch_bounds__(kThreads, 2) dq_rows(Dev D) {
  extern __shared__ double sm[];
  const int d = D.d, dv = D.dv, TK = D.tk, pd = d + 1, pdv = dv + 1;  // pd, pdv: smem row pitches
  const int64_t group = blockIdx.x / D.row_tiles, tile = blockIdx.x % D.row_tiles;
  const int64_t b = group / D.p.heads_kv, h_kv = group % D.p.heads_kv, r0 = tile * kRows;
  double* q = sm;                        // (R, d), pitch pd
  double* dor = q + kRows * pd;          // (R, dv), pitch pdv
  double* kt = dor + kRows * pdv;        // (TK, d), pitch pd
  double* vt = kt + TK * pd;             // (TK, dv), pitch pdv
  double* t_ds = vt + TK * pdv;          // (R, TK)
  double* t_w = t_ds + kRows * TK;       // (R, TK)
  double* t_ps = t_w + kRows * TK;       // (R, TK, 2): the tensor cores' q·k (p, a)
  double* t_pp = t_ps + kRows * TK * 2;  // (R, TK, 2): and d_o·v's
  const bool mma = Exact && kHaveDmma && D.mma;
  // This thread's elements of d_q and of its bound's sum (forward_rows' o_tot and o_part).
  double a_tot[kRowPer], a_part[kRowPer], e_tot[kRowPer], e_part[kRowPer];
  __shared__ int64_t s_j0[kRows], s_j1[kRows], s_row[kRows], s_h[kRows], s_i[kRows];
  __shared__ double s_st[kRows][kStat];
  __shared__ int s_qe[kRows], s_de[kRows], t_ke[kMaxTK], t_ve[kMaxTK];  // quanta of q, d_o rows; k, v keys

  const RowId id0 = row_id(D, b, h_kv, r0);
  const int64_t n_q = id0.n_q, n_k = id0.n_k;
  if (!id0.valid) return;
  if (threadIdx.x < kRows) {
    const int t = threadIdx.x;
    const RowId id = row_id(D, b, h_kv, r0 + t);
    int64_t j0 = 0, j1 = 0;
    if (id.valid) key_range(D.p, id.i, id.n_q, n_k, j0, j1);
    s_j0[t] = j0, s_j1[t] = j1;
    s_row[t] = id.valid ? q_row(D.p, D.s, b, id.h, id.i) : -1;
    s_h[t] = id.h, s_i[t] = id.i;
  }
#pragma unroll
  for (int e = 0; e < kRowPer; ++e) a_tot[e] = a_part[e] = e_tot[e] = e_part[e] = 0;
  __syncthreads();
  load_rows(q, D.q, kRows, kRows, d, [&](int t) { return s_row[t] < 0 ? int64_t(0) : s_row[t]; });
  load_rows(dor, D.d_o, kRows, kRows, dv, [&](int t) { return s_row[t] < 0 ? int64_t(0) : s_row[t]; });
  load_quanta(s_qe, D.qq, kRows, kRows, [&](int t) { return s_row[t] < 0 ? int64_t(0) : s_row[t]; });
  load_quanta(s_de, D.doq, kRows, kRows, [&](int t) { return s_row[t] < 0 ? int64_t(0) : s_row[t]; });
  __syncthreads();
  if (threadIdx.x < kRows) {  // D_i = d_o_i·o_i (Dot2) and its bound, o's own error included
    const int t = threadIdx.x;
    double* st = D.stat + (group * D.m_max + r0 + t) * kStat;
    if (s_row[t] >= 0 && st[kEmpty] == 0) {
      const double* o = row_ptr(D.o, s_row[t], dv);
      const double* oe = row_ptr(D.o_err, s_row[t], dv);
      double hi, lo, abs;
      dot2(dor + t * pdv, o, dv, hi, lo, abs);
      const double big_d = hi + lo;
      double from_o = 0;
      for (int l = 0; l < dv; ++l) from_o += fabs(dor[t * pdv + l]) * oe[l];
      st[kD] = big_d;
      st[kErrD] = (kU * (1 + 3 * kU) * fabs(big_d) + dot_err(dv, abs) + from_o / (1 - gamma_n(dv + 1)) + kTiny) * kSlack;
    }
    for (int c = 0; c < kStat; ++c) s_st[t][c] = s_row[t] >= 0 ? st[c] : 1.0;
  }
  int64_t lo = n_k, hi = 0;
  for (int t = 0; t < kRows; ++t)
    if (s_row[t] >= 0 && s_j1[t] > s_j0[t]) lo = imin(lo, s_j0[t]), hi = imax(hi, s_j1[t]);
  const int64_t t_first = lo / TK * TK;
  const double g_q = chunk_gamma(n_k, 0);
  __syncthreads();
  for (int64_t t0 = t_first; t0 < hi; t0 += TK) {
    const int cnt = int(imin(TK, n_k - t0));
    load_rows(kt, D.k, TK, cnt, d, [&](int t) { return kv_row(D.p, D.s, b, h_kv, t0 + t); });
    load_rows(vt, D.v, TK, cnt, dv, [&](int t) { return kv_row(D.p, D.s, b, h_kv, t0 + t); });
    load_quanta(t_ke, D.kq, TK, cnt, [&](int t) { return kv_row(D.p, D.s, b, h_kv, t0 + t); });
    load_quanta(t_ve, D.vq, TK, cnt, [&](int t) { return kv_row(D.p, D.s, b, h_kv, t0 + t); });
    __syncthreads();
    if (mma) {
      tile_dots<2>(q, pd, kRows, kt, pd, TK, d, nullptr, t_ps, 2 * TK, 2);
      tile_dots<2>(dor, pdv, kRows, vt, pdv, TK, dv, nullptr, t_pp, 2 * TK, 2, dot_blocks(kRows, TK));
      __syncthreads();
    }
    for (int idx = threadIdx.x; idx < kRows * TK; idx += blockDim.x) {
      const int t = idx / TK, jj = idx % TK;
      const int64_t j = t0 + jj;
      double sh, sl, eps;
      CapSlope cap;
      if (s_row[t] >= 0 && j >= s_j0[t] && j < s_j1[t] &&
          biased_score<Exact>(D, q + t * pd, kt + jj * pd, s_qe[t] + t_ke[jj], b, s_h[t], s_i[t], n_q, n_k, j, sh, sl,
                              eps, mma ? t_ps + 2 * idx : nullptr, &cap)) {
        const PairTerms pp = pair<Exact>(D, sh, sl, cap, dor + t * pdv, vt + jj * pdv, s_de[t] + t_ve[jj], s_st[t],
                                         mma ? t_pp + 2 * idx : nullptr);
        t_ds[idx] = pp.ds, t_w[idx] = pp.e + g_q * fabs(pp.ds);
      } else {
        t_ds[idx] = 0, t_w[idx] = 0;
      }
    }
    __syncthreads();
    const bool flush = t0 % kChunk == 0;
#pragma unroll
    for (int e = 0; e < kRowPer; ++e) {
      const int idx = int(threadIdx.x) + e * kThreads;
      if (idx >= kRows * d) break;
      const int t = idx / d, l = idx % d;
      if (flush) a_tot[e] += a_part[e], e_tot[e] += e_part[e], a_part[e] = 0, e_part[e] = 0;
      double pa = a_part[e], pe = e_part[e];
      for (int jj = 0; jj < TK; ++jj) {
        const double x = kt[jj * pd + l];
        pa += t_ds[t * TK + jj] * x;
        pe += t_w[t * TK + jj] * fabs(x);
      }
      a_part[e] = pa, e_part[e] = pe;
    }
    __syncthreads();
  }
  const double abs_scale = fabs(D.p.scale);
#pragma unroll
  for (int e = 0; e < kRowPer; ++e) {
    const int idx = int(threadIdx.x) + e * kThreads;
    if (idx >= kRows * d) break;
    const int t = idx / d, l = idx % d;
    if (s_row[t] < 0) continue;
    const int64_t out = s_row[t] * d + l;
    const double dq = D.p.scale * (a_tot[e] + a_part[e]);
    const double w = (e_tot[e] + e_part[e]) / (1 - g_q) + double(n_k) * kTiny;
    D.dq[out] = dq;
    D.dq_err[out] = (abs_scale * w + kU * fabs(dq) + kTiny) * kSlack;
  }
}

// d_k, d_v: KT keys per block; every row of the group in tiles of RT (Dev::kt, Dev::rt).
template <bool Exact>
__global__ void __launch_bounds__(kThreads, 2) dkv_keys(Dev D) {
  extern __shared__ double sm[];
  const int d = D.d, dv = D.dv, kKeyT = D.kt, kRowT = D.rt, pd = d + 1, pdv = dv + 1;  // smem row pitches
  const int64_t group = blockIdx.x / D.key_tiles, tile = blockIdx.x % D.key_tiles;
  const int64_t b = group / D.p.heads_kv, h_kv = group % D.p.heads_kv, k0 = tile * kKeyT;
  const int64_t n_q = seq_n_q(D.p, D.s, b), n_k = seq_n_k(D.p, D.s, b), m = int64_t(D.g) * n_q;
  if (k0 >= n_k) return;
  const int kcnt = int(imin(kKeyT, n_k - k0));
  double* kt = sm;                   // (KT, d), pitch pd
  double* vt = kt + kKeyT * pd;      // (KT, dv), pitch pdv
  double* qt = vt + kKeyT * pdv;     // (RT, d), pitch pd
  double* dot = qt + kRowT * pd;     // (RT, dv), pitch pdv
  double* t_ds = dot + kRowT * pdv;  // (RT, KT)
  double* t_w = t_ds + kRowT * kKeyT;
  double* t_p = t_w + kRowT * kKeyT;
  double* t_wv = t_p + kRowT * kKeyT;
  double* t_ps = t_wv + kRowT * kKeyT;      // (RT, KT, 2): the tensor cores' q·k (p, a)
  double* t_pp = t_ps + kRowT * kKeyT * 2;  // (RT, KT, 2): and d_o·v's
  const bool mma = Exact && kHaveDmma && D.mma;
  // This thread's elements of the (KT, d) d_k tile and the (KT, dv) d_v tile, and of their bounds' sums:
  // e-th at threadIdx.x + e·kThreads, a chunk of rows' partial (part) and the chunks before it (tot).
  double k_tot[kKeyPer], k_part[kKeyPer], ke_tot[kKeyPer], ke_part[kKeyPer];
  double v_tot[kKeyPer], v_part[kKeyPer], ve_tot[kKeyPer], ve_part[kKeyPer];
  __shared__ int64_t s_j0[kMaxRowT], s_j1[kMaxRowT], s_row[kMaxRowT], s_h[kMaxRowT], s_i[kMaxRowT];
  __shared__ double s_st[kMaxRowT][kStat];
  __shared__ int s_ke[kMaxKeyT], s_ve[kMaxKeyT], t_qe[kMaxRowT], t_de[kMaxRowT];  // quanta: block keys, tile rows

  load_rows(kt, D.k, kKeyT, kcnt, d, [&](int t) { return kv_row(D.p, D.s, b, h_kv, k0 + t); });
  load_rows(vt, D.v, kKeyT, kcnt, dv, [&](int t) { return kv_row(D.p, D.s, b, h_kv, k0 + t); });
  load_quanta(s_ke, D.kq, kKeyT, kcnt, [&](int t) { return kv_row(D.p, D.s, b, h_kv, k0 + t); });
  load_quanta(s_ve, D.vq, kKeyT, kcnt, [&](int t) { return kv_row(D.p, D.s, b, h_kv, k0 + t); });
#pragma unroll
  for (int e = 0; e < kKeyPer; ++e) {
    k_tot[e] = k_part[e] = ke_tot[e] = ke_part[e] = 0;
    v_tot[e] = v_part[e] = ve_tot[e] = ve_part[e] = 0;
  }
  const double g_k = chunk_gamma(m, 0);
  __syncthreads();
  for (int64_t r0 = 0; r0 < m; r0 += kRowT) {
    if (r0 % kChunk == 0) {  // a new chunk of rows, whether or not this tile sees the block's keys
#pragma unroll
      for (int e = 0; e < kKeyPer; ++e) {
        k_tot[e] += k_part[e], ke_tot[e] += ke_part[e], k_part[e] = 0, ke_part[e] = 0;
        v_tot[e] += v_part[e], ve_tot[e] += ve_part[e], v_part[e] = 0, ve_part[e] = 0;
      }
    }
    if (threadIdx.x < kRowT) {
      const int t = threadIdx.x;
      const RowId id = row_id(D, b, h_kv, r0 + t);
      int64_t j0 = 0, j1 = 0;
      if (id.valid) key_range(D.p, id.i, id.n_q, n_k, j0, j1);
      s_j0[t] = j0, s_j1[t] = j1;
      s_row[t] = id.valid ? q_row(D.p, D.s, b, id.h, id.i) : -1;
      s_h[t] = id.h, s_i[t] = id.i;
      const double* st = D.stat + (group * D.m_max + r0 + t) * kStat;
      for (int c = 0; c < kStat; ++c) s_st[t][c] = id.valid ? st[c] : 1.0;
    }
    __syncthreads();
    bool any = false;  // does a row of the tile see a key of the block?
    for (int t = 0; t < kRowT; ++t)
      any = any || (s_row[t] >= 0 && s_j0[t] < k0 + kcnt && s_j1[t] > k0 && s_j1[t] > s_j0[t]);
    if (any) {
      load_rows(qt, D.q, kRowT, kRowT, d, [&](int t) { return s_row[t] < 0 ? int64_t(0) : s_row[t]; });
      load_rows(dot, D.d_o, kRowT, kRowT, dv, [&](int t) { return s_row[t] < 0 ? int64_t(0) : s_row[t]; });
      load_quanta(t_qe, D.qq, kRowT, kRowT, [&](int t) { return s_row[t] < 0 ? int64_t(0) : s_row[t]; });
      load_quanta(t_de, D.doq, kRowT, kRowT, [&](int t) { return s_row[t] < 0 ? int64_t(0) : s_row[t]; });
      __syncthreads();
      if (mma) {
        tile_dots<2>(qt, pd, kRowT, kt, pd, kKeyT, d, nullptr, t_ps, 2 * kKeyT, 2);
        tile_dots<2>(dot, pdv, kRowT, vt, pdv, kKeyT, dv, nullptr, t_pp, 2 * kKeyT, 2, dot_blocks(kRowT, kKeyT));
        __syncthreads();
      }
      for (int idx = threadIdx.x; idx < kRowT * kKeyT; idx += blockDim.x) {
        const int t = idx / kKeyT, jj = idx % kKeyT;
        const int64_t j = k0 + jj;
        double sh, sl, eps;
        CapSlope cap;
        if (jj < kcnt && s_row[t] >= 0 && j >= s_j0[t] && j < s_j1[t] &&
            biased_score<Exact>(D, qt + t * pd, kt + jj * pd, t_qe[t] + s_ke[jj], b, s_h[t], s_i[t], n_q, n_k, j, sh,
                                sl, eps, mma ? t_ps + 2 * idx : nullptr, &cap)) {
          const double* st = s_st[t];
          const PairTerms pp = pair<Exact>(D, sh, sl, cap, dot + t * pdv, vt + jj * pdv, t_de[t] + s_ve[jj], st,
                                           mma ? t_pp + 2 * idx : nullptr);
          const double kp = st[kKappa] * (1 + st[kKappa]);
          t_ds[idx] = pp.ds, t_w[idx] = pp.e + g_k * fabs(pp.ds);
          t_p[idx] = pp.pr, t_wv[idx] = (kp + g_k * (1 + kp)) * pp.pr + st[kTail] + kTiny;
        } else {
          t_ds[idx] = 0, t_w[idx] = 0, t_p[idx] = 0, t_wv[idx] = 0;
        }
      }
      __syncthreads();
#pragma unroll
      for (int e = 0; e < kKeyPer; ++e) {
        const int idx = int(threadIdx.x) + e * kThreads;
        if (idx < kKeyT * d) {
          const int jj = idx / d, l = idx % d;
          double pa = k_part[e], pe = ke_part[e];
          for (int t = 0; t < kRowT; ++t) {
            const double x = qt[t * pd + l];
            pa += t_ds[t * kKeyT + jj] * x;
            pe += t_w[t * kKeyT + jj] * fabs(x);
          }
          k_part[e] = pa, ke_part[e] = pe;
        }
        if (idx < kKeyT * dv) {
          const int jj = idx / dv, l = idx % dv;
          double pa = v_part[e], pe = ve_part[e];
          for (int t = 0; t < kRowT; ++t) {
            const double x = dot[t * pdv + l];
            pa += t_p[t * kKeyT + jj] * x;
            pe += t_wv[t * kKeyT + jj] * fabs(x);
          }
          v_part[e] = pa, ve_part[e] = pe;
        }
      }
    }
    __syncthreads();
  }
  const double abs_scale = fabs(D.p.scale);
#pragma unroll
  for (int e = 0; e < kKeyPer; ++e) {
    const int idx = int(threadIdx.x) + e * kThreads;
    if (idx < kcnt * d) {
      const int jj = idx / d, l = idx % d;
      const int64_t out = grad_kv_row(D, b, h_kv, k0 + jj) * d + l;
      const double dk = D.p.scale * (k_tot[e] + k_part[e]);
      const double w = (ke_tot[e] + ke_part[e]) / (1 - g_k) + double(m) * kTiny;
      D.dk[out] = dk;
      D.dk_err[out] = (abs_scale * w + kU * fabs(dk) + kTiny) * kSlack;
    }
    if (idx < kcnt * dv) {
      const int jj = idx / dv, l = idx % dv;
      const int64_t out = grad_kv_row(D, b, h_kv, k0 + jj) * dv + l;
      D.dvg[out] = v_tot[e] + v_part[e];
      D.dvg_err[out] = ((ve_tot[e] + ve_part[e]) / (1 - g_k) + double(m) * kTiny) * kSlack;
    }
  }
}

__global__ void libm_kernel(const double* x, double* e, double* l, double* th, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) e[i] = exp(x[i]), l[i] = log(x[i]), th[i] = tanh(x[i]);
}

// ---------------------------------------------------------------------------------------------------
// Host side.
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("GPU oracle: ") + what + ": " + cudaGetErrorString(e));
}

struct Buffer {
  double* p = nullptr;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (p) cudaFree(p);
  }
  double* alloc(size_t n) {
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(double));
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clears it: the device stays usable
      p = nullptr;
      throw NotCovered("the GPU oracle ran out of device memory");
    }
    check(e, "cudaMalloc");
    return p;
  }
  double* upload(const std::vector<double>& v) {
    alloc(v.size());
    if (!v.empty()) check(cudaMemcpy(p, v.data(), v.size() * sizeof(double), cudaMemcpyHostToDevice), "upload");
    return p;
  }
  void download(std::vector<double>& v, size_t n) const {
    v.resize(n);
    if (n) check(cudaMemcpy(v.data(), p, n * sizeof(double), cudaMemcpyDeviceToHost), "download");
  }
};
struct IntBuffer {
  int32_t* p = nullptr;
  IntBuffer() = default;
  IntBuffer(const IntBuffer&) = delete;
  IntBuffer& operator=(const IntBuffer&) = delete;
  ~IntBuffer() {
    if (p) cudaFree(p);
  }
  const int32_t* upload(const std::vector<int32_t>& v) {
    if (v.empty()) return nullptr;
    check(cudaMalloc(&p, v.size() * sizeof(int32_t)), "cudaMalloc");
    check(cudaMemcpy(p, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "upload");
    return p;
  }
  // The quantum exponent of each of the `rows` rows of width `width` of x (row_quanta).
  const int32_t* quanta(const double* x, int64_t rows, int width) {
    if (rows <= 0 || width <= 0) return nullptr;
    const cudaError_t e = cudaMalloc(&p, size_t(rows) * sizeof(int32_t));
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      p = nullptr;
      throw NotCovered("the GPU oracle ran out of device memory");
    }
    check(e, "cudaMalloc");
    row_quanta<<<unsigned((rows + 255) / 256), 256>>>(x, rows, width, p);
    check(cudaGetLastError(), "quanta launch");
    return p;
  }
};

bool certifiable(double x) { return std::isfinite(x) && std::fabs(x) < std::ldexp(1.0, kMaxExp); }

// Shared memory of each kernel (tiles of rows at pitch width + 1, then the accumulators).
// (The last terms: the tensor cores' (p, a) of each pair's dot products, one or two of them.)
size_t fwd_smem(int d, int dv, int tk) {
  return size_t(kRows * (d + 1) + tk * (d + 1) + tk * (dv + 1) + 2 * kRows * tk + dv + 2 * kRows * tk) * 8;
}
size_t dq_smem(int d, int dv, int tk) {
  return size_t(kRows * (d + 1) + kRows * (dv + 1) + tk * (d + 1) + tk * (dv + 1) + 2 * kRows * tk + 4 * kRows * tk) *
         8;
}
size_t dkv_smem(int d, int dv, int kt, int rt) {
  return size_t(kt * (d + 1) + kt * (dv + 1) + rt * (d + 1) + rt * (dv + 1) + 4 * rt * kt + 4 * rt * kt) * 8;
}
// Keys per tile of the row kernels: the most of 32, 16, 8 whose shared memory fits two blocks on a
// multiprocessor, else one (0: none).
int keys_per_tile(int d, int dv) {
  for (size_t budget : {kSmemBudget / 2, kSmemBudget})
    for (int tk : {32, 16, 8})
      if (std::max(fwd_smem(d, dv, tk), dq_smem(d, dv, tk)) <= budget) return tk;
  return 0;
}
// dkv_keys' keys per block and rows per tile: the most keys (each thread accumulates at most kKeyPer
// elements of a key tile) and then the most rows (a pair per thread: 8 x 32) whose shared memory fits
// two blocks on a multiprocessor, else one (false: none).
bool dkv_tiles(int d, int dv, int& kt, int& rt) {
  for (size_t budget : {kSmemBudget / 2, kSmemBudget})
    for (int k : {8, 4, 2})
      for (int r : {32, 16, 8})
        if (k * std::max(d, dv) <= kThreads * kKeyPer && dkv_smem(d, dv, k, r) <= budget) {
          kt = k, rt = r;
          return true;
        }
  return false;
}

// Whether every input is a float value: then each product of two of them is exact in float64 (24 + 24
// significand bits, exponents from 2^-298 on: no underflow), and the ExactProducts kernels apply.
bool float_inputs(const Tensors64& in) {
  for (const std::vector<double>* t : {&in.q, &in.k, &in.v, &in.d_o})
    for (double x : *t)
      if (double(float(x)) != x) return false;
  return true;
}

// The three kernels for one choice of Exact (dot2's TwoProd left out: the same bits).
template <bool Exact>
struct Kernels {
  static constexpr auto forward = forward_rows<Exact>;
  static constexpr auto dq = dq_rows<Exact>;
  static constexpr auto dkv = dkv_keys<Exact>;
};

template <bool Exact>
void launch(const Dev& D, bool grads, bool have_d_o, int64_t row_blocks, int64_t key_blocks, int* flag) {
  using K = Kernels<Exact>;
  const int d = D.d, dv = D.dv, tk = D.tk;
  const size_t s1 = fwd_smem(d, dv, tk);
  check(cudaFuncSetAttribute(K::forward, cudaFuncAttributeMaxDynamicSharedMemorySize, int(s1)), "smem");
  K::forward<<<unsigned(row_blocks), kThreads, s1>>>(D);
  check(cudaGetLastError(), "forward launch");
  check(cudaDeviceSynchronize(), "forward");
  int f = 0;
  check(cudaMemcpy(&f, flag, sizeof(int), cudaMemcpyDeviceToHost), "flag");
  if (f & kFlagRange)
    throw NotCovered("the GPU oracle does not cover scores this large (a row's score bound past 2^-56 or its "
                     "low parts past 2^-30; the CPU oracle takes them in MPFR)");
  if (grads && have_d_o) {
    const size_t s2 = dq_smem(d, dv, tk), s3 = dkv_smem(d, dv, D.kt, D.rt);
    check(cudaFuncSetAttribute(K::dq, cudaFuncAttributeMaxDynamicSharedMemorySize, int(s2)), "smem");
    check(cudaFuncSetAttribute(K::dkv, cudaFuncAttributeMaxDynamicSharedMemorySize, int(s3)), "smem");
    K::dq<<<unsigned(row_blocks), kThreads, s2>>>(D);
    check(cudaGetLastError(), "d_q launch");
    if (key_blocks > 0) K::dkv<<<unsigned(key_blocks), kThreads, s3>>>(D);
    check(cudaGetLastError(), "d_k launch");
    check(cudaDeviceSynchronize(), "backward");
  }
}

}  // namespace

std::string not_covered(const Problem& p, bool grads) {
  (void)grads;
  const int dv = head_dim_v(p);
  int kt = 0, rt = 0;
  if (p.d > kMaxHeadDim || dv > kMaxHeadDim || keys_per_tile(p.d, dv) == 0 || !dkv_tiles(p.d, dv, kt, rt))
    return "head dims past " + std::to_string(kMaxHeadDim);
  return "";
}

std::string not_covered(const Tensors64& in) {
  for (const std::vector<double>* t : {&in.q, &in.k, &in.v, &in.d_o})
    for (double x : *t)
      if (!certifiable(x)) return "a non-finite input or one past 2^500 in magnitude";
  // The variants' values: slopes finite, sinks and additive mask values finite or -inf (hidden),
  // below 2^500 like the inputs.
  auto in_range = [](double x, bool minus_inf) { return certifiable(x) || (minus_inf && x == -INFINITY); };
  for (double x : in.seq.alibi_slopes)
    if (!in_range(x, false)) return "a non-finite ALiBi slope";
  for (double x : in.seq.sinks)
    if (!in_range(x, true)) return "a sink past 2^500 in magnitude";
  for (double x : in.seq.mask)
    if (!in_range(x, true)) return "a mask value past 2^500 in magnitude";
  return "";
}

bool tensor_cores_present() {
  int device = 0, major = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
  return major >= 8;
}

bool device_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

double device_bytes(const Problem& p, bool grads) {
  const double q = double(numel_q(p)), kv = double(numel_kv(p)), v = double(numel_v(p)), o = double(numel_o(p));
  const double lse = double(numel_lse(p));
  const double rows = double(p.batch) * p.heads_kv * (double(p.heads_q / p.heads_kv) * p.n_q);
  double n = q + kv + v + 3 * o + 2 * lse + rows * kStat;
  // The mask tensor and block mask, at most (batch, heads_q, rows, cols) each.
  const double bh = double(p.batch) * p.heads_q;
  if (has_mask_tensor(p)) n += bh * double(p.n_q) * double(p.n_k);
  if (has_block_mask(p))
    n += bh * double((p.n_q + p.block_q - 1) / p.block_q) * double((p.n_k + p.block_k - 1) / p.block_k);
  n += 2.0 * p.heads_q;  // slopes, sinks
  // Paged key gradients go to one compact row per logical key (grad_kv_row), as many as or more than the pool's.
  const double keys = is_paged(p) ? double(p.varlen ? p.total_k : p.batch * int64_t(p.n_k)) * p.heads_kv : 0;
  if (grads) n += o + 2 * (q + std::max(kv, keys * p.d) + std::max(v, keys * head_dim_v(p)));
  return n * 8 + 64.0 * (1 << 20);
}

double device_free_bytes() {
  size_t free_b = 0, total = 0;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
  return double(free_b);
}

// Paged K/V: each physical row sums the gradients of the logical keys mapped to it, in the order and
// with the charge of the CPU oracle (reference/certified_groups.cpp, add_paged): from the second term
// on, one rounding of the sum, u |sum| (slack included). compact: the rows grad_kv_row wrote.
void add_pages(const Problem& p, const Seqs& hs, const Certified& compact, Certified& c) {
  const int64_t d = p.d, dv = head_dim_v(p);
  c.value.d_k.assign(size_t(numel_kv(p)), 0.0), c.err.d_k.assign(size_t(numel_kv(p)), 0.0);
  c.value.d_v.assign(size_t(numel_v(p)), 0.0), c.err.d_v.assign(size_t(numel_v(p)), 0.0);
  std::vector<int32_t> uses(size_t(rows_kv(p)), 0);  // terms added so far
  auto add = [](double& val, double& err, double x, double e, bool first) {
    val += x;
    err += e + (first ? 0.0 : kU * std::fabs(val) * kSlack);
  };
  int64_t before = 0;  // logical keys of the sequences before b
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t n = seq_n_k(p, hs, b);
    for (int32_t h_kv = 0; h_kv < p.heads_kv && n > 0 && seq_n_q(p, hs, b) > 0; ++h_kv)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t row = kv_row(p, hs, b, h_kv, j), at = (before + j) * p.heads_kv + h_kv;
        const bool first = uses[size_t(row)]++ == 0;
        for (int64_t l = 0; l < d; ++l)
          add(c.value.d_k[size_t(row * d + l)], c.err.d_k[size_t(row * d + l)], compact.value.d_k[size_t(at * d + l)],
              compact.err.d_k[size_t(at * d + l)], first);
        for (int64_t l = 0; l < dv; ++l)
          add(c.value.d_v[size_t(row * dv + l)], c.err.d_v[size_t(row * dv + l)],
              compact.value.d_v[size_t(at * dv + l)], compact.err.d_v[size_t(at * dv + l)], first);
      }
    before += p.varlen ? n : p.n_k;
  }
}

Certified certified(const Problem& p, const Tensors64& in, const Schedule& schedule) {
  const bool grads = !in.d_o.empty() || numel_o(p) == 0;
  std::string why = not_covered(p, grads);
  if (why.empty()) why = not_covered(in);
  if (!why.empty()) throw NotCovered("the GPU oracle does not cover " + why);
  const int d = p.d, dv = head_dim_v(p), g = p.heads_q / p.heads_kv, tk = keys_per_tile(d, dv);
  Certified c;

  Buffer q, k, v, d_o, o, o_err, o_mag, lse, lse_err, dq, dq_err, dk, dk_err, dv_b, dv_err, stat;
  IntBuffer cu_q, cu_k, pad_q, pad_k, pages, qq, kq, vq, doq;
  Buffer slopes, sinks, mask, block_mask;
  int* flag = nullptr;
  Dev D{};
  D.p = p;
  D.s = Seqs{};
  D.s.cu_q = cu_q.upload(in.seq.cu_seqlens_q), D.s.cu_k = cu_k.upload(in.seq.cu_seqlens_k);
  D.s.pad_q = pad_q.upload(in.seq.cu_seqlens_q_padded), D.s.pad_k = pad_k.upload(in.seq.cu_seqlens_k_padded);
  D.s.page_table = pages.upload(in.seq.page_table);
  D.slopes = p.alibi ? slopes.upload(in.seq.alibi_slopes) : nullptr;
  D.sinks = p.sinks ? sinks.upload(in.seq.sinks) : nullptr;
  D.mask = has_mask_tensor(p) ? mask.upload(in.seq.mask) : nullptr;
  D.block_mask = has_block_mask(p) ? block_mask.upload(in.seq.block_mask) : nullptr;
  for (int a = 0; a < 4; ++a) {
    D.mshape[a] = D.mask ? in.seq.mask_shape[size_t(a)] : 0;
    D.bshape[a] = D.block_mask ? in.seq.block_mask_shape[size_t(a)] : 0;
  }
  D.q = q.upload(in.q), D.k = k.upload(in.k), D.v = v.upload(in.v);
  D.d_o = d_o.upload(in.d_o);
  // Float inputs: each row's quantum, for dot_float (the same bits as Dot2, fewer operations).
  const bool exact = float_inputs(in);
  if (exact) {
    D.qq = qq.quanta(D.q, numel_q(p) / p.d, p.d), D.kq = kq.quanta(D.k, numel_kv(p) / p.d, p.d);
    D.vq = vq.quanta(D.v, numel_v(p) / head_dim_v(p), head_dim_v(p));
    if (!in.d_o.empty()) D.doq = doq.quanta(D.d_o, numel_o(p) / head_dim_v(p), head_dim_v(p));
  }
  D.o = o.alloc(size_t(numel_o(p))), D.o_err = o_err.alloc(size_t(numel_o(p))), D.o_mag = o_mag.alloc(size_t(numel_o(p)));
  D.lse = lse.alloc(size_t(numel_lse(p))), D.lse_err = lse_err.alloc(size_t(numel_lse(p)));
  D.g = g, D.d = d, D.dv = dv, D.tk = tk;
  D.mma = schedule.tensor_cores && tensor_cores_present();
  dkv_tiles(d, dv, D.kt, D.rt);
  D.m_max = int64_t(g) * p.n_q;
  D.row_tiles = (D.m_max + kRows - 1) / kRows;
  D.key_tiles = (int64_t(p.n_k) + D.kt - 1) / D.kt;
  const int64_t groups = int64_t(p.batch) * p.heads_kv;
  D.stat = stat.alloc(size_t(groups * D.m_max * kStat));
  check(cudaMemset(D.stat, 0, size_t(groups * D.m_max * kStat) * sizeof(double)), "cudaMemset");
  check(cudaMalloc(&flag, sizeof(int)), "cudaMalloc");
  struct FreeFlag {
    int* f;
    ~FreeFlag() { cudaFree(f); }
  } free_flag{flag};
  check(cudaMemset(flag, 0, sizeof(int)), "cudaMemset");
  D.flag = flag;
  // With paged K/V the key gradients land in compact rows (grad_kv_row), one per logical key.
  const bool paged = is_paged(p);
  const int64_t compact = (p.varlen ? int64_t(in.seq.cu_seqlens_k.back()) : p.batch * int64_t(p.n_k)) * p.heads_kv;
  const size_t n_dk = size_t(paged ? compact * d : numel_kv(p)), n_dv = size_t(paged ? compact * dv : numel_v(p));
  if (grads) {
    D.dq = dq.alloc(size_t(numel_q(p))), D.dq_err = dq_err.alloc(size_t(numel_q(p)));
    D.dk = dk.alloc(n_dk), D.dk_err = dk_err.alloc(n_dk);
    D.dvg = dv_b.alloc(n_dv), D.dvg_err = dv_err.alloc(n_dv);
    // Keys no query of their group sees, and physical rows no sequence reads, stay 0.
    for (Buffer* bf : {&dk, &dk_err}) check(cudaMemset(bf->p, 0, n_dk * 8), "cudaMemset");
    for (Buffer* bf : {&dv_b, &dv_err}) check(cudaMemset(bf->p, 0, n_dv * 8), "cudaMemset");
    for (Buffer* bf : {&dq, &dq_err}) check(cudaMemset(bf->p, 0, size_t(numel_q(p)) * 8), "cudaMemset");
  }
  // Rows of varlen tokens no sequence covers do not exist; every output row is written by its kernel.
  for (Buffer* bf : {&o, &o_err, &o_mag}) check(cudaMemset(bf->p, 0, size_t(numel_o(p)) * 8), "cudaMemset");
  for (Buffer* bf : {&lse, &lse_err}) check(cudaMemset(bf->p, 0, size_t(numel_lse(p)) * 8), "cudaMemset");

  const int64_t row_blocks = groups * D.row_tiles, key_blocks = groups * D.key_tiles;
  if (row_blocks > int64_t(INT32_MAX) || key_blocks > int64_t(INT32_MAX))
    throw NotCovered("the GPU oracle does not cover problems of more than 2^31 blocks");
  if (row_blocks > 0 && D.m_max > 0 && p.n_k > 0) {
    if (exact)
      launch<true>(D, grads, !in.d_o.empty(), row_blocks, key_blocks, flag);
    else launch<false>(D, grads, !in.d_o.empty(), row_blocks, key_blocks, flag);
  }
  // Rows of a group with no key: o = 0, lse = the sink (-inf without one), exactly, as on the CPU.
  o.download(c.value.o, size_t(numel_o(p)));
  o_err.download(c.err.o, size_t(numel_o(p)));
  o_mag.download(c.o_mag, size_t(numel_o(p)));
  lse.download(c.value.lse, size_t(numel_lse(p)));
  lse_err.download(c.err.lse, size_t(numel_lse(p)));
  const Seqs hs = in.seq.seqs();
  for (int64_t b = 0; b < p.batch; ++b)
    if (seq_n_k(p, hs, b) == 0)
      for (int32_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < seq_n_q(p, hs, b); ++i)
          c.value.lse[size_t(lse_index(p, hs, b, h, i))] = p.sinks ? in.seq.sinks[size_t(h)] : -INFINITY;
  if (grads) {
    dq.download(c.value.d_q, size_t(numel_q(p)));
    dq_err.download(c.err.d_q, size_t(numel_q(p)));
    if (!paged) {
      dk.download(c.value.d_k, n_dk);
      dk_err.download(c.err.d_k, n_dk);
      dv_b.download(c.value.d_v, n_dv);
      dv_err.download(c.err.d_v, n_dv);
    } else {
      Certified rows;
      dk.download(rows.value.d_k, n_dk);
      dk_err.download(rows.err.d_k, n_dk);
      dv_b.download(rows.value.d_v, n_dv);
      dv_err.download(rows.err.d_v, n_dv);
      add_pages(p, hs, rows, c);
    }
  }
  return c;
}

void device_libm(const std::vector<double>& x, std::vector<double>& exp_x, std::vector<double>& log_x,
                 std::vector<double>& tanh_x) {
  Buffer bx, be, bl, bt;
  bx.upload(x);
  be.alloc(x.size());
  bl.alloc(x.size());
  bt.alloc(x.size());
  const int64_t n = int64_t(x.size());
  if (n > 0) libm_kernel<<<unsigned((n + 255) / 256), 256>>>(bx.p, be.p, bl.p, bt.p, n);
  check(cudaGetLastError(), "libm launch");
  check(cudaDeviceSynchronize(), "libm");
  be.download(exp_x, x.size());
  bl.download(log_x, x.size());
  bt.download(tanh_x, x.size());
}

}  // namespace fc::ref::gpu
