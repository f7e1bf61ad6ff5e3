// The audit's sweep: which cases (dtype x regime x shape) run, how their inputs are drawn, what a
// case costs, and how a sweep splits into shards. A case is named by its id ("F16/normal/n1024");
// its inputs are a function of (id, seed) alone, so a shard, a merged report and a replay line
// (`--case ID`) all see the same numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/registry.hpp"
#include "contract/tensor.hpp"

namespace fc::report {

struct CaseSpec {
  int32_t seq = 0;                    // position in the plan: the order of cases in a report, merged or not
  std::string id;                     // "<dtype>/<regime>/<shape>", unique in the catalogue
  std::string regime;                 // normal | outliers | scores | causal_top_left | causal_bottom_right | gqa, or a
                                      // variant: varlen | paged | window | softcap | alibi | d_v | strides |
                                      // sinks | padded_varlen | mask_bool | mask_additive | block_mask
  Problem p;                          // with the variants' fields (varlen totals, page table size, window, ...)
  double sigma = 1;                   // q, k ~ N(0, sigma^2); v, d_o ~ N(0, 1)
  bool outliers = false;              // FA3 paper: + N(0, 100) Bernoulli(0.001) on q, k, v
  bool positive_v = false;            // v ~ |N(0, 1)|: o stays away from 0, so a rounding bias keeps its sign
  bool backward = false;              // d_o given: gradients audited too
  int32_t rows = 0;                   // 0: every query row checked; R: only the last R rows (o, lse and d_q;
                                      // d_k and d_v of the keys only those rows see: checked_keys)
  bool gpu_only = false;              // past the CPU kernels' range (N > 4096): run by GPU kernels and plugins
  std::vector<int32_t> len_q, len_k;  // varlen: each sequence's query and key count (p.batch of each)
  std::string layout;                 // strides: "bshd" (tokens outer, padded rows) or "mixed"; "": compact
  std::vector<double> sinks;          // sinks: each query head's sink logit (-inf: none for that head)
  std::vector<int32_t> pad_q, pad_k;  // padded_varlen: padding tokens before each sequence (batch of each) and
                                      // after the last (one more entry)
  std::string mask_pattern;           // mask_*, block_mask: "random" (density 1/2, one row hidden) or
                                      // "key_padding" (each slice's first keys visible)
};

// Query rows a long case (gpu_only) checks in the plan: the last kLongRows, on all their keys (those
// that see the most keys under a mask): the certificate and a bound cost O(n_k d) per row.
inline constexpr int32_t kLongRows = 1024;
// Whether only c's last c.rows query rows are checked.
inline bool is_cut(const CaseSpec& c) { return c.rows > 0 && c.rows < c.p.n_q; }
// Whether the same-precision baseline (a CPU kernel) runs on c: not on a long case checked on every
// row, which would take it hours at N = 131072; its ratios over a few rows would mislead beside the
// kernel's errors over all of them (the first rows, averaging few keys, err the most in absolute terms).
bool baseline_runs(const CaseSpec& c);

// The variants a case uses (its problem's, and strides for a strided layout): a subject that does not
// declare one of them is never given the case.
Variants case_variants(const CaseSpec& c);

struct PlanOptions {
  bool quick = false;  // the CI sweep: N <= 256, a few seconds on two cores
  std::vector<DType> dtypes = sweep_dtypes();  // F16, BF16, F32
  bool gpu = false;                  // a GPU kernel is audited: add the long cases (N = 16384 ... 131072)
  std::vector<std::string> regimes;  // empty: every regime
};

// The cases to run, in plan order (seq = index).
std::vector<CaseSpec> audit_plan(const PlanOptions& o);
// Every case any plan can hold (quick, full, GPU), for `--case ID`; nullopt-like: false when unknown.
bool find_case(const std::string& id, CaseSpec* out);
// Every regime name, in plan order (the variant regimes last).
const std::vector<std::string>& regime_names();

// The problem whose rows are the checked rows of c: c.p itself, or its last c.rows query rows as a
// problem of their own (bottom-right aligned, which keeps every row's visible keys).
Problem checked_problem(const CaseSpec& c);
// Keys whose d_k, d_v the checked rows hold whole: every key when every row is checked; under a causal
// mask, the last c.rows keys, which no earlier row sees (row n_q - R + i' sees keys up to n_k - R + i');
// none otherwise. Their count, and the last `checked_keys` rows of every (batch, kv head) of a key-side
// (width d or d_v) tensor of the checked problem.
int32_t checked_keys(const CaseSpec& c);
std::vector<double> checked_key_rows(const CaseSpec& c, const std::vector<double>& kv_side, int64_t width);
// Inputs of the checked problem, cut from the full inputs (q and d_o rows; k, v whole).
Inputs checked_inputs(const CaseSpec& c, const Inputs& full);
// Rows [n_q - rows, n_q) of every (batch, head) of a query-shaped (width = d) or lse-shaped (width
// = 1) full tensor; identity when c.rows == 0.
std::vector<double> checked_rows(const CaseSpec& c, const std::vector<double>& full, int64_t width);

// Deterministic inputs: values rounded to the case's dtype, d_o when c.backward.
Inputs make_inputs(const CaseSpec& c, uint64_t seed);
// FNV-1a 64 over the bytes of q, k, v, d_o and the variants' data (offsets, page table, slopes, sinks,
// padded offsets, masks): the gate refuses to compare cases whose inputs differ.
uint64_t inputs_hash(const Inputs& in);

// Relative cost of a case (proportional to query-key pairs x d x heads, a varlen batch's summed over its
// sequences; x3.5 with the backward).
double case_cost(const CaseSpec& c);
// The cases of shard `index` of `count` (indices into plan): longest-processing-time-first over
// case_cost, so shards take about equal time; deterministic, and every case in exactly one shard.
std::vector<size_t> shard_cases(const std::vector<CaseSpec>& plan, int index, int count);

}  // namespace fc::report
