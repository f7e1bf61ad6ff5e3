// The rounding error of one long sum as a kernel computes it (contract/arithmetic.h's Chain), as a
// weight per term: |computed - exact| <= (sum_j kappa_j |x_j| + sum_j (1 + kappa_j) err_j) s(kappa_max)
// + events floor exp(kappa_max), s(K) = expm1(K) / K, where x_j are the exact terms, err_j the errors
// they carry before they are added, and kappa_j counts, in units u, every rounding term j goes
// through: its product, its own add and every later add of the partial it sits in, the merges and
// rescales of that partial, a lane tree's levels. For a tensor-core step kappa also carries the step's alignment losses, bounded linearly
// (docs/error-model.md, "Accumulation chains"). The weights depend only on the chain and on which
// positions hold a term, so a whole tensor's bound is a few weighted sums (GEMMs), and it holds at
// any length: every rounding is counted where it happens, not n u against the whole sum.
#pragma once

#include <cstdint>
#include <vector>

#include "contract/arithmetic.h"

namespace fc::ref {

struct ChainWeights {
  std::vector<double> kappa;  // (n) per term, in absolute units (u already applied)
  double kappa_max = 0;
  double events = 0;  // rounding operations, each of which may underflow by `floor`
  double floor = 0;   // the accumulator's underflow floor (the smallest normal under FTZ)
  // Of those, the roundings that multiply (products that are not exact, merges and rescales): with
  // gradual underflow the only ones that can lose to it, an add of two values of the accumulator's
  // type whose result is subnormal being exact (Hauser, "Handling floating-point exceptions", 1996).
  double mult_events = 0;
  // The second-order cover: (sum kappa |x| + sum (1 + kappa) err) * scale(); chain_scale(kappa_max).
  double scale() const;
  // events * floor, each underflow's error grown by the later roundings that hold it (<= exp(kappa_max)).
  double floors() const;
};

// Absolute underflow errors f, grown by later roundings of at most kappa (f exp(kappa), rounded up).
double grown_floors(double f, double kappa);

// s(K) = expm1(K) / K (1 at K = 0), rounded up: with kappa_j <= K, kappa_j s(K) >= expm1(kappa_j) >=
// prod (1 + u_i) - 1 over the roundings that hold term j, and (1 + kappa_j) s(K) >= exp(kappa_j).
// Finite at every length (a serial fp16 sum of 4096 terms has K = 2: s = 3.19), and at most the
// first-order cover 1 / (1 - K) wherever that is finite.
double chain_scale(double kappa_max);

// Weights of a sum whose terms sit at positions 0, 1, ..., n - 1 (a visible prefix of keys, or the
// head dimension), any declared structure; `extra_merges` more merges (Merge::Serial) or rescales
// (Merge::Rescale) of the running total follow the last term (blocks the kernel walks past it).
ChainWeights chain_weights(const Chain& c, int64_t n, bool flush_subnormals, int64_t extra_merges = 0);

// kappa of one term of a chain without blocks, lanes or pre-sums whose terms are any subset of its
// positions: the term is the t-th of n present terms and sits in the step-th of n_steps present
// tensor-core steps (steps of kTensorCoreFused positions). For d_k, d_v, whose rows a causal mask
// thins key by key.
double plain_kappa(const Chain& c, int64_t t, int64_t n, int64_t step, int64_t n_steps);
bool is_plain(const Chain& c);

}  // namespace fc::ref
