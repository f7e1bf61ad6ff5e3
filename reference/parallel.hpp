// The oracles' parallel loops: a fixed set of independent tasks spread over std::threads. Work is
// always cut into the same tasks whatever the thread count (callers cut by rows, never by threads),
// so every result is bitwise the same with 1 thread or 16. Also the programs' start in huge pages, for
// the oracles' large vectors (restart_with_huge_pages).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace fc::ref {

// Threads the parallel loops use: FC_THREADS when set to a positive integer, otherwise every
// hardware thread (std::thread::hardware_concurrency, at least 1).
int worker_threads();

// Runs fn(t) once for every t in [0, tasks), on up to worker_threads() threads (the caller is one).
// Tasks must write disjoint outputs. Called from inside a task it runs the tasks in order on the
// calling thread (no nested pools). The first exception a task throws is rethrown here once every
// task has finished or been skipped.
void parallel_for(int64_t tasks, const std::function<void(int64_t)>& fn);

// Row blocks of `block` rows covering [0, rows): fn(begin, end) for each, in parallel.
void parallel_rows(int64_t rows, int64_t block, const std::function<void(int64_t, int64_t)>& fn);

// Each array assigned its count of zeros, a task each: fresh memory faults in on the thread that first
// writes it, and an oracle's output arrays are a gigabyte apiece on a training shape (serial where all
// of them together are small).
void zero_each(const std::vector<std::pair<std::vector<double>*, int64_t>>& arrays);

// Blocks past 32 MiB (a training shape's tensors are 10^8 values apiece) are mapped afresh and fault
// in 4 KB at a time, zeroed. Where transparent huge pages are given on request ("madvise"), glibc asks
// for 2 MB ones when its tunable glibc.malloc.hugetlb is 1, which it reads only at start: so a
// program's main calls this first, and the process restarts itself once with it set. FC_NO_RESTART,
// or a glibc.malloc.hugetlb already in GLIBC_TUNABLES, keeps the process as it is; a failed restart
// (no /proc) carries on unchanged. docs/DECISIONS.md has the measurement.
void restart_with_huge_pages(char** argv);

// While one is alive (and `on`), this thread's parallel loops run serially: for work too small to
// pay for starting threads.
class SerialScope {
 public:
  explicit SerialScope(bool on);
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool was_;
};

}  // namespace fc::ref
