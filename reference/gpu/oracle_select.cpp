// The oracle dispatch (oracle_select.hpp). Compiled in every build; the GPU oracle only with CUDA
// (FC_GPU_ORACLE), so a CPU-only build answers `--oracle gpu` with a clear error.
#include "reference/gpu/oracle_select.hpp"

#include <atomic>
#include <mutex>

#if FC_GPU_ORACLE
#include "reference/gpu/bounds_gpu.hpp"
#include "reference/gpu/certified_gpu.hpp"
#endif

namespace fc::ref {

namespace {
std::atomic<int32_t> g_kind{int32_t(OracleKind::Auto)};
// Auto leaves problems below this many multiply-adds of S (heads_q · n_q · n_k · d over the batch) to
// the CPU: they take it milliseconds on one thread (certified_groups.cpp runs them serially), while a
// GPU call pays its allocations, copies and launches and takes turns with every other thread's.
constexpr double kAutoGpuWork = double(1 << 24);

double score_work(const Problem& p) {
  const double rows = p.varlen ? double(p.total_q) : double(p.batch) * p.n_q;
  return rows * p.heads_q * double(p.n_k) * p.d;
}
#if FC_GPU_ORACLE
std::mutex g_device;  // one device: GPU calls take turns
#endif
}  // namespace

bool parse_oracle(const std::string& text, OracleKind* kind) {
  if (text == "auto") *kind = OracleKind::Auto;
  else if (text == "cpu") *kind = OracleKind::Cpu;
  else if (text == "gpu") *kind = OracleKind::Gpu;
  else return false;
  return true;
}

const char* oracle_name(OracleKind kind) {
  switch (kind) {
    case OracleKind::Cpu: return "cpu";
    case OracleKind::Gpu: return "gpu";
    case OracleKind::Auto: break;
  }
  return "auto";
}

void set_oracle(OracleKind kind) { g_kind.store(int32_t(kind)); }
OracleKind oracle() { return OracleKind(g_kind.load()); }

bool gpu_oracle_built() { return FC_GPU_ORACLE != 0; }

bool uses_gpu(OracleKind kind, const Problem& p, bool grads, std::string* why) {
  std::string reason;
  if (kind == OracleKind::Cpu) {
    reason = "--oracle cpu";
  } else if (kind == OracleKind::Auto && score_work(p) < kAutoGpuWork) {
    reason = "a small problem (the CPU oracle takes milliseconds)";
  } else {
#if FC_GPU_ORACLE
    if (!gpu::device_present()) {
      reason = "no CUDA device is present";
    } else if (const std::string nc = gpu::not_covered(p, grads); !nc.empty()) {
      reason = "the GPU oracle does not cover " + nc;
    } else if (const double need = gpu::device_bytes(p, grads), free_b = gpu::device_free_bytes(); need > free_b) {
      reason = "the GPU oracle needs " + std::to_string(int64_t(need / (1 << 20))) + " MiB of device memory, " +
               std::to_string(int64_t(free_b / (1 << 20))) + " MiB are free";
    }
#else
    (void)p, (void)grads;
    reason = "this flashcheck was built without CUDA";
#endif
  }
  if (why) *why = reason;
  return reason.empty();
}

bool uses_gpu(OracleKind kind, const Problem& p, const Tensors64& in, std::string* why) {
  const bool grads = !in.d_o.empty() || numel_o(p) == 0;
  if (!uses_gpu(kind, p, grads, why)) return false;
#if FC_GPU_ORACLE
  if (const std::string nc = gpu::not_covered(in); !nc.empty()) {
    if (why) *why = "the GPU oracle does not cover " + nc;
    return false;
  }
#endif
  return true;
}

Certified certify(OracleKind kind, const Problem& p, const Tensors64& in) {
  std::string why;
  if (!uses_gpu(kind, p, in, &why)) {
    if (kind == OracleKind::Gpu) throw OracleUnavailable("--oracle gpu: " + why);
    return certified(p, in);
  }
#if FC_GPU_ORACLE
  try {
    const std::lock_guard<std::mutex> one_at_a_time(g_device);  // one device: calls take turns
    return gpu::certified(p, in);
  } catch (const gpu::NotCovered& e) {
    if (kind == OracleKind::Gpu) throw OracleUnavailable(std::string("--oracle gpu: ") + e.what());
  } catch (const std::runtime_error& e) {  // a CUDA error (a kernel under test may have broken the context)
    if (kind == OracleKind::Gpu) throw OracleUnavailable(std::string("--oracle gpu: ") + e.what());
  }
#endif
  return certified(p, in);
}

Certified certify(const Problem& p, const Tensors64& in) { return certify(oracle(), p, in); }

bool bounds_on_gpu(OracleKind kind, const Problem& p, bool grads, const std::vector<Precision>& precs,
                   std::string* why) {
  std::string reason;
  if (precs.empty())
    reason = "no arithmetic to bound";
  else if (!uses_gpu(kind, p, grads, &reason))
    reason = reason.empty() ? "the oracle runs on the CPU" : reason;
#if FC_GPU_ORACLE
  for (const Precision& pr : precs)
    if (reason.empty())
      if (const std::string nc = gpu::bounds_not_covered(p, pr); !nc.empty())
        reason = "the GPU error model does not cover " + nc;
#endif
  if (why) *why = reason;
  return reason.empty();
}

Bounds bounds(const Problem& p, const Tensors64& in, const Certified& ref, const std::vector<Precision>& precs,
              std::string* where) {
  if (where) *where = "cpu";
#if FC_GPU_ORACLE
  const bool grads = !in.d_o.empty() || numel_o(p) == 0;
  if (bounds_on_gpu(oracle(), p, grads, precs) && gpu::not_covered(in).empty()) {  // the shape, then the inputs
    try {
      const std::lock_guard<std::mutex> one_at_a_time(g_device);
      Bounds b = gpu::error_bounds_max(p, in, ref, precs);
      if (where) *where = "gpu";
      return b;
    } catch (const std::runtime_error&) {  // a CUDA error or the device's memory: the CPU's bounds are the same
    }
  }
#endif
  return error_bounds_max(p, in, ref, precs);
}

}  // namespace fc::ref
