// A-priori error bounds (derived in docs/error-model.md): for every output element of a kernel, a
// rigorous first-principles bound on |kernel - exact| computed from the inputs, the certified
// reference and what the kernel declares about its arithmetic (contract/arithmetic.h). No fudge
// factors: every term is one rounding (or one chain of roundings) of the algorithm, named in
// bounds.cpp, bounds_backward.cpp and bounds_chain.cpp.
//
// Also the comparator that applies a bound (non-finite values handled exactly) and the
// FlashAttention rule (kernel error <= 2 x same-precision baseline error + output rounding noise).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "certified.hpp"
#include "contract/arithmetic.h"

namespace fc::ref {

// What the error model needs to know about how a kernel computes: the storage type of its inputs and
// outputs, and its declared arithmetic (the rounding chain of every sum, contract/arithmetic.h).
// A problem with per-tensor dtypes (mixed_dtypes) gives each output its own rounding (o and d_o in
// dtypes().o, d_q in .q, d_k and d_v in .kv), its inputs exact in their own types, and charges the
// roundings the arithmetic makes "to storage" (P, dS, a baseline's S) at the coarsest of the three
// types, with the largest of their underflow floors (the widest-safe reading of "storage").
struct Precision {
  DType storage = DType::F32;  // q k v o d_o d_q d_k d_v (outputs are rounded to it); mixed: the coarsest
  Arithmetic ar;
  bool mixed = false;    // per-tensor dtypes: `tensors` holds them
  DtypeSet tensors = {};
  DtypeSet dtypes() const { return mixed ? tensors : DtypeSet{storage, storage, storage}; }
};
// The Precision of problem p under arithmetic ar: storage p's dtype, or the coarsest of its per-tensor ones.
Precision precision_for(const Problem& p, const Arithmetic& ar);
// The largest underflow floor among a precision's storage types (underflow_floor(storage) when uniform).
double storage_floor(const Precision& prec);

// Unit roundoff of a dtype (2^-p for p significand bits) and half its smallest subnormal (the
// absolute rounding error floor of gradual underflow).
double unit_roundoff(DType t);
// Whether a has the larger unit roundoff (is the coarser type).
bool coarser(DType a, DType b);
double underflow_floor(DType t);
double min_normal(DType t);

// P's (and dS's) rounding before its GEMM, as declared: to storage (or Arithmetic::p_type where that
// is coarser) when the kernel rounds P there and that is coarser than the element-wise type, then to
// the operand type if coarser still. u: the relative error of both together.
struct PRounding {
  bool to_first = false, to_second = false;
  DType first = DType::F32, second = DType::F32;
  double u = 0;
};
PRounding p_rounding(const Precision& prec);

// The declared arithmetic summarised for criteria that bound a row's sums in any order (the
// metamorphic laws' differential bounds, properties/differential.cpp): the largest unit of an
// accumulation step (a whole ulp where a chain truncates: tensor cores, directed rounding), the
// types S and P are rounded to, the key tile, and the flags the bounds need.
struct Coarse {
  DType storage = DType::F32;
  double u_acc = 0x1p-24;
  DType s_dtype = DType::F32, p_dtype = DType::F32;  // p_dtype: P's coarsest rounding, else `soft`
  int64_t block_n = 0;                               // o's key tile (0: one tile)
  bool l_sums_rounded_p = false, flush_subnormals = false;
};
Coarse coarse(const Precision& prec);

// A bound on |y - exact| and on |y - r| for every y = RN_out(RN_soft(x)) (the output's last
// operation, rounded to nearest in `soft`, then converted to `out`; soft_round = false: the
// conversion only) with |x - exact| <= e and |exact - r| <= err_r. Rounding is monotone, so y lies
// between the roundings of r -+ (e + err_r): within a rounding step the bound is the distance to the
// neighbour the rounding can reach (plus err_r), never more than e + 2 err_r + half an ulp.
double rounded_bound(double r, double e, double err_r, DType soft, DType out, bool soft_round);

// The largest number of terms one sum of the model may have (n_k for d_q and o; group * n_q for
// d_k, d_v): past it the fp64 evaluation of the bound itself is not covered by its slack, and
// error_bounds refuses (std::invalid_argument).
inline constexpr int64_t kMaxTerms = int64_t(1) << 20;

// Elementwise bounds on |kernel - exact|, shaped like Result64 (gradients when in.d_o is given).
// The certified reference's own error is included, so a kernel passes iff
// |kernel - ref.value| <= bound everywhere (see within_bound).
struct Bounds {
  std::vector<double> o, lse, d_q, d_k, d_v;
};
Bounds error_bounds(const Problem& p, const Tensors64& in, const Certified& ref, const Precision& prec);
// The elementwise largest of error_bounds over several arithmetics (NaN kept): a kernel known only to
// be one of them (compare's unknown key tile). Dense problems run every arithmetic on each row block
// of one pass, its products of the inputs computed once: the same bits as error_bounds with each.
Bounds error_bounds_max(const Problem& p, const Tensors64& in, const Certified& ref, const std::vector<Precision>& precs);

// One tensor held against its reference and bound. Non-finite values are exact: NaN only where the
// reference is NaN, infinities with the reference's sign, an infinite kernel value accepted only on
// the side where reference -+ bound reaches past the output dtype's largest value; a NaN bound is a
// failure, never a skip. An infinite bound where the reference is finite is a failure too (a vacuous
// bound proves nothing: the error model's bounds, Infinite::Fails), or, for a criterion that declares
// it makes no claim there (Infinite::NoClaim: a differential tolerance at huge scores), accepts any
// value but NaN.
struct Verdict {
  bool ok = true;
  int64_t worst = -1;   // flat index of the largest measured/bound (or of the first failure)
  double measured = 0;  // |kernel - ref| there
  double bound = 0;     // the bound there
  double ratio = 0;     // max measured/bound over the tensor (0/0 counts as 0)
  std::string why;      // empty when ok
};
enum class Infinite : int32_t { Fails, NoClaim };
Verdict within_bound(const std::vector<double>& kernel, const std::vector<double>& ref,
                     const std::vector<double>& bound, DType out, Infinite infinite = Infinite::Fails);

// FlashAttention's gate on one tensor: max|kernel - ref| <= 2 max|baseline - ref| + noise, with
// noise = FlashAttention's atol (twice the round trip x + 0.3 - 0.3 in the output type, at most
// 4 u (max|x| + 0.3)) plus the reference's own error. Meant for 16-bit storage, as FA uses it.
struct FaRule {
  double kernel_err = 0, baseline_err = 0, noise = 0;
  bool holds = false;
};
FaRule fa_rule(const std::vector<double>& kernel, const std::vector<double>& baseline, const std::vector<double>& ref,
               const std::vector<double>& ref_err, DType out);

}  // namespace fc::ref
