// The merge laws' generator (properties/laws_merge.cpp): one merge problem for merge kernel k drawn
// from rng. P from 1 to 16 (GQA-decode-like shapes a third of the time: rows = a query group of 2..8
// heads packed as rows, 2..4 kv heads), lse_p around a row base of magnitude 0 to 3e38 with a spread
// of 0.5 to 400, empty partials (o = 0, lse = -inf) at a drawn rate and (allow_empty_rows) rows whose
// partials are all empty, o_p normal (times 100 at times) in a dtype k merges, strided views at times.
#pragma once

#include <random>

#include "kernels/registry.hpp"

namespace fc::props {

MergeInputs draw_merge(const Kernel& k, std::mt19937_64& rng, bool allow_empty_rows = true);

}  // namespace fc::props
