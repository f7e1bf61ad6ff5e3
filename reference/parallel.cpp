#include "reference/parallel.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fc::ref {
namespace {

thread_local bool in_task = false;  // nested parallel_for calls run serially

}  // namespace

int worker_threads() {
  if (const char* s = std::getenv("FC_THREADS"); s && *s) {
    char* end = nullptr;
    const long n = std::strtol(s, &end, 10);
    if (end && *end == '\0' && n >= 1) return int(std::min<long>(n, 1024));
  }
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

void parallel_for(int64_t tasks, const std::function<void(int64_t)>& fn) {
  if (tasks <= 0) return;
  const int64_t threads = std::min<int64_t>(tasks, in_task ? 1 : worker_threads());
  if (threads == 1) {
    for (int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    in_task = true;
    for (int64_t t = next++; t < tasks && !failed; t = next++) {
      try {
        fn(t);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
    in_task = false;
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(threads - 1));
  for (int64_t i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (std::thread& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

void parallel_rows(int64_t rows, int64_t block, const std::function<void(int64_t, int64_t)>& fn) {
  block = std::max<int64_t>(block, 1);
  parallel_for((rows + block - 1) / block, [&](int64_t t) { fn(t * block, std::min(rows, (t + 1) * block)); });
}

void zero_each(const std::vector<std::pair<std::vector<double>*, int64_t>>& arrays) {
  int64_t total = 0;
  for (const auto& a : arrays) total += a.second;
  const SerialScope few(total < (int64_t(1) << 20));
  parallel_for(int64_t(arrays.size()), [&](int64_t t) {
    arrays[size_t(t)].first->assign(size_t(arrays[size_t(t)].second), 0.0);
  });
}

SerialScope::SerialScope(bool on) : was_(in_task) { in_task = in_task || on; }
SerialScope::~SerialScope() { in_task = was_; }

void restart_with_huge_pages(char** argv) {
  if (std::getenv("FC_NO_RESTART")) return;
  const char* t = std::getenv("GLIBC_TUNABLES");
  if (t && std::strstr(t, "glibc.malloc.hugetlb")) return;
  const std::string v = t && *t ? std::string(t) + ":glibc.malloc.hugetlb=1" : "glibc.malloc.hugetlb=1";
  if (setenv("GLIBC_TUNABLES", v.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Still here: the restart failed. Carry on; a process started later sees the variable.
}

}  // namespace fc::ref
