#include "kernels/plugin/executor.hpp"

#include <fmt/format.h>

#include <exception>

namespace fc::plugin {
namespace {

std::string error_text(const fc_kernel* k, const char* entry, int status) {
  const char* why = nullptr;
  if (k->last_error) {
    try {
      why = k->last_error();
    } catch (...) {
      why = nullptr;
    }
  }
  std::string text = fmt::format("{} returned {}", entry, status);
  if (why && *why) text += fmt::format(": {:.1000}", why);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

}  // namespace

Executor::Executor(const fc_kernel* k) : k_(k) {}

std::string Executor::init() { return on_cuda() ? stage_.init() : ""; }

namespace {
thread_local bool probing_now = false;
}  // namespace

bool probing_supports() { return probing_now; }

bool Executor::supports(const CallPlan& plan) const {
  fc_forward_args args;
  const DLDevice dev{on_cuda() ? kDLCUDA : kDLCPU, 0};
  make_args(plan, nullptr, dev, &args, nullptr);
  probing_now = plan.probing != 0;
  fc_problem problem = problem_args(plan, nullptr, dev);
  problem.probing = plan.probing;
  bool yes = false;
  try {
    yes = k_->supports(&problem, &args) != 0;
  } catch (...) {
    yes = false;  // a C++ exception out of a C entry point: no
  }
  probing_now = false;
  return yes;
}

CallResult Executor::call(const CallPlan& plan, unsigned char* arena) {
  CallResult r;
  const char* entry = plan.backward ? "backward" : "forward";
  if (plan.backward && !k_->backward) return {false, "the kernel has no backward", false};
  unsigned char* base = arena;
  if (on_cuda()) {
    r.error = stage_.upload(arena, plan.bytes);
    if (!r.error.empty()) return r.ok = false, r.error = "uploading the inputs: " + r.error, r;
    base = stage_.data();
  }
  const DLDevice dev{on_cuda() ? kDLCUDA : kDLCPU, 0};
  fc_forward_args fwd;
  fc_backward_args bwd;
  make_args(plan, base, dev, &fwd, &bwd);
  const fc_problem problem = problem_args(plan, base, dev);
  int status = 0;
  try {
    status =
        plan.backward ? k_->backward(&problem, &bwd, stage_.stream()) : k_->forward(&problem, &fwd, stage_.stream());
  } catch (const std::exception& e) {
    return {false, fmt::format("{} threw a C++ exception through the C ABI: {}", entry, e.what()), false};
  } catch (...) {
    return {false, fmt::format("{} threw a C++ exception through the C ABI", entry), false};
  }
  if (status != 0) r.ok = false, r.error = error_text(k_, entry, status);
  if (on_cuda()) {
    const std::string cuda = stage_.sync(&r.fatal);
    if (!cuda.empty())
      r.ok = false, r.error += (r.error.empty() ? "" : "; ") + fmt::format("after {}: {}", entry, cuda);
    if (!r.fatal) {
      const std::string down = stage_.download(arena, plan.bytes);
      if (!down.empty())
        r.ok = false, r.error += std::string(r.error.empty() ? "" : "; ") + "downloading the outputs: " + down;
    }
  }
  return r;
}

}  // namespace fc::plugin
