#include "plugin/executor.hpp"

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

std::string Executor::init() {
  if (!on_cuda()) return "";
  has_second_ = DeviceStage::count() >= 2 && second_.init(1).empty();  // no second GPU: every call on device 0
  return stage_.init(0);  // last: device 0 stays current
}

namespace {
thread_local bool probing_now = false;
}  // namespace

bool probing_supports() { return probing_now; }

namespace {
bool producer_allowed_now = true;
}  // namespace

void allow_producer(bool yes) { producer_allowed_now = yes; }
bool producer_allowed() { return producer_allowed_now; }

namespace {
uint64_t call_hash(const CallPlan& plan) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a over the problem's bytes and the call's kind
  const auto* b = reinterpret_cast<const unsigned char*>(&plan.problem);
  for (size_t x = 0; x < sizeof plan.problem; ++x) h = (h ^ b[x]) * 0x100000001B3ull;
  return (h ^ uint64_t(plan.backward)) * 0x100000001B3ull;
}
}  // namespace

bool producer_call(const CallPlan& plan) { return producer_allowed_now && (call_hash(plan) >> 7) % 2 == 1; }
bool second_gpu_call(const CallPlan& plan) {
  CallPlan shape = plan;  // the problem alone: supports(), forward and backward of a case share the device
  shape.problem.config = 0, shape.problem.probing = 0, shape.backward = 0;
  return (call_hash(shape) >> 11) % 2 == 1;
}

bool Executor::supports(const CallPlan& plan) const {
  fc_forward_args args;
  const DLDevice dev{on_cuda() ? kDLCUDA : kDLCPU, on_cuda() && has_second_ && second_gpu_call(plan) ? 1 : 0};
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
  DeviceStage& stage = has_second_ && second_gpu_call(plan) ? second_ : stage_;
  if (on_cuda()) {
    r.error = stage.upload(arena, plan.bytes, producer_call(plan));
    if (!r.error.empty()) return r.ok = false, r.error = "uploading the inputs: " + r.error, r;
    base = stage.data();
  }
  const DLDevice dev{on_cuda() ? kDLCUDA : kDLCPU, on_cuda() ? stage.device() : 0};
  fc_forward_args fwd;
  fc_backward_args bwd;
  make_args(plan, base, dev, &fwd, &bwd);
  const fc_problem problem = problem_args(plan, base, dev);
  int status = 0;
  try {
    status = plan.backward ? k_->backward(&problem, &bwd, stage.stream()) : k_->forward(&problem, &fwd, stage.stream());
  } catch (const std::exception& e) {
    return {false, fmt::format("{} threw a C++ exception through the C ABI: {}", entry, e.what()), false};
  } catch (...) {
    return {false, fmt::format("{} threw a C++ exception through the C ABI", entry), false};
  }
  if (status != 0) r.ok = false, r.error = error_text(k_, entry, status);
  if (on_cuda()) {
    const std::string cuda = stage.sync(&r.fatal);
    if (!cuda.empty())
      r.ok = false, r.error += (r.error.empty() ? "" : "; ") + fmt::format("after {}: {}", entry, cuda);
    if (!r.fatal) {
      const std::string down = stage.download(arena, plan.bytes);
      if (!down.empty())
        r.ok = false, r.error += std::string(r.error.empty() ? "" : "; ") + "downloading the outputs: " + down;
    }
  }
  return r;
}

}  // namespace fc::plugin
