// The variants' generators (contract v2): from a dense case's inputs and its law-specific seed
// (Case::aux), the variant structure a variant law runs on — varlen lengths with zero-length and
// length-1 sequences and batches of fewer tokens than sequences, paged layouts of any page size
// with shuffled, reversed and repeated pages, windows of 0, of at least n and straddling tile edges,
// strides with permuted axes, padding and reversed axes, softcaps near the scores' range. The values
// are the dense case's, so the value regimes carry over; the structure is drawn here and printed by
// each `describe_*` so that a counterexample says what it ran.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/registry.hpp"
#include "contract/tensor.hpp"

namespace fc::props {

using Rng = std::mt19937_64;

// Per-sequence lengths of a varlen batch; src[b]: the dense batch element whose rows sequence b
// takes (its first len_q[b] queries and len_k[b] keys).
struct SeqLens {
  std::vector<int32_t> q, k;
  std::vector<int32_t> src;
};

// Lengths for a varlen batch cut from a dense batch of `batch` elements of (n_q, n_k): every element
// once, plus up to three more sequences; each length 0, 1, full or in between; one draw in eight
// makes every length 0 or 1 (fewer tokens than sequences).
SeqLens draw_lengths(Rng& rng, int32_t batch, int32_t n_q, int32_t n_k);
std::string describe(const SeqLens& s);

// The varlen batch: sequence b is dense element src[b] cut to its lengths (q, k, v, d_o).
Inputs to_varlen(const Inputs& dense, const SeqLens& lens);

// Padded varlen (contract v3): after each sequence's tokens, pad_q[b] (pad_k[b]) padding tokens on the
// query (key) axis, and lead_q (lead_k) before the first sequence: each 0, 1, 2, 3, 7 or up to 16, and
// at least one sequence with tokens starts away from its compact position on each axis where one has
// tokens (so cu_seqlens and the padded offsets differ where a kernel reads).
struct Padding {
  std::vector<int32_t> q, k;
  int32_t lead_q = 0, lead_k = 0;
};
Padding draw_padding(Rng& rng, const SeqLens& lens);
std::string describe(const Padding& pad);
// The varlen batch with its sequences at the padded offsets (cu_seqlens_q_padded, cu_seqlens_k_padded);
// the padding tokens hold large finite values (the hostile harness puts NaN there when a kernel is called).
Inputs to_padded(const Inputs& varlen, const Padding& pad, Rng& rng);
// The padded batch packed end to end: the compact varlen batch of the same sequences.
Inputs unpadded(const Inputs& padded);

// Page sizes: 1, 2, 3, 5, 7, 16, 17, 48, 64, 100, 128, 256 (powers of two and not).
int32_t draw_page_size(Rng& rng);

// A paged copy of a varlen batch: keys on pages of `page_size`, the table in order, reversed or
// shuffled, with one or two spare pages no sequence reads (filled with large values) and, when
// `repeats`, possibly one physical page that two table entries share (the later sequence's keys
// overwrite it: unpaged() reads what the table maps). how: a one-line description.
Inputs to_paged(const Inputs& varlen, int32_t page_size, bool repeats, Rng& rng, std::string* how);
// Paged K/V at production lengths (issue: index widths that break past 16 pages of 256 and at page
// index 2^15): 1 or 2 sequences of 1..4 queries, sequence 0's keys on 17..512 pages (one in eight
// exactly 512) of one page size (1, 2, 16, 64, 128 or 256: 256 crosses 16 pages of 256, > 4096
// keys), the other's on up to 4; the heads, head dims, dtypes, mask and the other variants those of
// `like`. The keys' work (queries x heads_q x (d + d_v) x keys) is capped at `work`: kLongPagedWork
// where the CPU oracle judges every row of it (milliseconds), which shortens the rows of wide heads;
// kLongPagedWorkGpu where a GPU kernel runs it and the GPU oracle, if any, judges it. Half the
// time, where the pool fits kLongPagedPool elements, the pages sit at physical indices >= 2^15 (an
// int16 page index wraps there); one in four, the table is wider than 2^16 entries (the columns past a
// sequence's pages are never read). Values on a 1/8 grid in [-2, 2]; the unused pool holds zeros (the
// hostile harness puts NaN there). how: a one-line description.
inline constexpr int64_t kLongPagedWork = int64_t(1) << 21;
inline constexpr int64_t kLongPagedWorkGpu = int64_t(1) << 24;  // 512 pages of 256 at one query of width 128
inline constexpr int64_t kLongPagedPool = int64_t(1) << 21;
Inputs to_long_paged(const Inputs& like, Rng& rng, std::string* how, int64_t work = kLongPagedWork);

// The same keys laid out contiguously, read through the table (the paged law's other side).
Inputs unpaged(const Inputs& paged);
// Paged: how many (sequence, key) pairs read each physical key row (page slot).
std::vector<int32_t> slot_reads(const Inputs& paged);

// A window side: -1 (unbounded), 0, 1, 2, kBlockN - 1, kBlockN, kBlockN + 1, n - 1, n, n + 7 or any in
// [0, n]; never both sides -1.
void draw_window(Rng& rng, int32_t n, int32_t block_n, int32_t* left, int32_t* right);

// The same values in a strided view: axes in a random storage order, 0 to 3 elements of padding
// after each axis, some axes reversed (negative strides), leading padding. how: appends a description.
HostTensor draw_strided(const HostTensor& t, Rng& rng, std::string* how);

// A softcap near the scores' range: max_abs times one of 0.01, 0.1, 0.3, 0.6, 0.9, 1.1, 2, 8.
double draw_softcap(Rng& rng, double max_abs);

// Attention sinks on in (variant_mix.cpp): one fp32 logit per query head, each drawn from the case's
// own scores (max_score, max_abs of score_stats): at -inf (no sink), near the top score plus
// log n_k (the sink about as heavy as every key together), at the top score, far above it (o -> 0,
// lse -> the sink) and far below it (weight underflowing to 0). *how gets a description.
Inputs with_sinks(const Inputs& in, Rng& rng, std::string* how);

// Mask tensors (contract v3, variant_mix.cpp), on a dense problem: boolean (when bool_ok) or
// additive in one of `dtypes` (when non-empty; two draws in three, F32 in half of them), broadcast
// over batch (B_m 1 or batch) and heads (H_m 1 or heads_q) or not. Boolean patterns: random bits
// of density 1/10, 1/2 or 9/10, a causal diagonal of either alignment, key padding; additive values
// 0, -inf, small (|x| <= 8), large finite (-1e4, -3e4; an F32 mask on scores not in F16 also -1e9);
// in half the draws one row every key of which is hidden. *how gets a description.
Inputs with_mask_tensor(const Inputs& dense, bool bool_ok, const std::vector<DType>& dtypes, Rng& rng,
                        std::string* how);
// A block-sparse mask on a dense problem: block sizes 1, 2, 3, 16, 64, 128 or the whole length on each
// axis, bits of density 1/4, 1/2 or 3/4, broadcast or not, in half the draws one query block row of
// false bits (rows every key of which is hidden).
Inputs with_block_mask(const Inputs& dense, Rng& rng, std::string* how);
// The dense boolean mask tensor that a block mask stands for ((B_m, H_m, n_q, n_k), the block mask's
// broadcast), and the problem with it in place of the block mask.
HostTensor dense_of_block_mask(const Inputs& in);
// Whether mask tensors may join a problem: dense, its full mask (batch, heads_q, n_q, n_k) of at most
// 2^22 elements (16 MiB as F32, beside the kernel's own copy and the references' float64 one).
bool mask_size_ok(const Problem& p);
// A head dim of v different from d: 1, d/2, d + 1, d + 8, 2d or 3 (variant_mix.cpp).
int32_t draw_d_v(Rng& rng, int32_t d);
// The dense case with v and d_o cut or repeated column-wise to width d_v (the same values).
Inputs with_d_v(const Inputs& dense, int32_t d_v);

// A variant problem from a dense case: each variant in `have` joins with probability one half (strides
// one quarter): a window (tiles of block_n), a softcap near the scores' range, ALiBi slopes, d_v != d,
// varlen lengths and then paged K/V, and padded offsets (on an unpaged varlen batch with a compact q).
// Then a mask tensor (three draws in four; additive ones in mask_dtypes) and a block mask (one in
// two), on dense problems (mask_size_ok). how: a one-line description ("dense" when none
// joined). long_paged_work: to_long_paged's cap on the long paged problems' work.
Inputs with_variants(const Variants& have, const Inputs& dense, int32_t block_n, Rng& rng, std::string* how,
                     const std::vector<DType>& mask_dtypes = kernel_floats(), int64_t long_paged_work = kLongPagedWork);

// Sequence b of a varlen batch as a dense batch-1 problem (its lengths must be >= 1).
Inputs dense_sequence(const Inputs& varlen, int64_t b);

}  // namespace fc::props
