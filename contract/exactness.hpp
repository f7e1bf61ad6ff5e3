// A kernel's exactness claims (KernelInfo::exact), apart so that the CUDA kernels' traits headers
// (kernels/cuda/*_traits.hpp), which nvcc compiles, can state theirs. No dependencies.
#pragma once

namespace fc {

// What a kernel computes the same way on the two runs of a metamorphic law, so that the law asks
// for the same bits, or charges only what the runs do not share (properties/differential.hpp;
// docs/laws.md). Each is a claim about the kernel's arithmetic; a kernel that breaks one fails the
// law that relies on it.
struct Exactness {
  bool rows = false;           // a query row's o and lse depend only on q_i, k, v and the key tiling:
                               // never on the row's position, the other rows or kBlockM
  bool d_q_rows = false;       // ... and so does d_q (no atomics or split sums across key blocks)
  bool shared_scores = false;  // s_ij depends only on q_i, k_j and the scale, not on the key's
                               // position or the tile size
  bool tile_weights = false;   // ... and a key's weight exp(s - m), rounded to P's type, only on s_ij
                               // and the running max at the end of its tile of kBlockN keys (from
                               // key 0): permuting keys within their tiles reorders sums only
  bool exact_scores = false;   // an exact dot product gives an exact s and s - m (no folded scale, no
                               // rounding of s or m to a narrower type): with grid inputs and a
                               // power-of-two scale, shifting every key shifts every score exactly
  bool mask_walk = false;      // a key a mask tensor or block mask hides costs nothing (no add, no
                               // rescale but by exp(0) = 1) and a block mask is read as the dense mask
                               // of its blocks: the FA2 loop order then gives a boolean mask equal to a
                               // built-in mask that mask's bits
};

}  // namespace fc
