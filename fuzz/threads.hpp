// The campaigns' loop over independent tasks on `threads` std::threads (the caller is one), the
// oracle's own pools serial inside each (its parallel loops would otherwise nest). Unlike
// ref::parallel_for it takes the thread count from the campaign's --threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "reference/parallel.hpp"

namespace fc::fuzz {

// Runs fn(i) for every i in [0, n); tasks must write disjoint outputs.
inline void on_threads(int threads, int64_t n, const std::function<void(int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  auto work = [&] {
    const ref::SerialScope serial(true);
    for (int64_t i; (i = next++) < n;) fn(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int64_t>(threads, n); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace fc::fuzz
