// The oracles' parallel loops: a fixed set of independent tasks spread over std::threads. Work is
// always cut into the same tasks whatever the thread count (callers cut by rows, never by threads),
// so every result is bitwise the same with 1 thread or 16.
#pragma once

#include <cstdint>
#include <functional>

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
