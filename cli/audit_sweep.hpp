// The first audit's pieces: the embedded default sweep (problems per dtype), deterministic inputs,
// and the error metrics of one kernel output against the certified reference.
#pragma once

#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "reference/certified.hpp"

namespace fc::cli {

struct SweepCase {
  std::string label;  // e.g. "gqa_bottom_right"
  Problem p;
  double amp;  // q and k entries uniform in [-amp, amp] (v, d_o in [-1, 1])
};

// A handful of problems for `dtype`: square, GQA with n_q != n_k, both causal alignments, rows with
// no visible key, and a wide-score regime (|s| in the hundreds).
std::vector<SweepCase> default_sweep(DType dtype);

// Deterministic inputs for case number `index` (values rounded to p.dtype; d_o always present).
Inputs make_inputs(const SweepCase& c, uint64_t index);

// The certified reference of the inputs (their exact values in fp64).
ref::Certified reference_of(const Inputs& in);

// Errors of one output against the reference. NaN anywhere makes the metric NaN (never skipped).
struct Errors {
  double o = 0;     // max_ik |o - o_ref| / sum_j P_ij |v_jk|   (0/0 = 0, x/0 = inf)
  double lse = 0;   // max_i |lse - lse_ref|                   (-inf vs -inf = 0)
  double grad = 0;  // max over d_q, d_k, d_v of ||g - g_ref||_2 / ||g_ref||_2
  bool has_grad = false;
};
Errors measure(const Outputs& got, const ref::Certified& want);

// Elementwise max that keeps NaN (std::max would drop it depending on argument order).
double worst(double a, double b);
Errors worst(const Errors& a, const Errors& b);

}  // namespace fc::cli
