#include "cli/options.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include "cli/command.hpp"
#include "io/errors.hpp"
#include "io/numbers.hpp"
#include "reference/gpu/oracle_select.hpp"
#include "reference/parallel.hpp"

namespace fc::cli {

CLI::Validator decimal_unsigned() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t x = 0;
        return io::parse_decimal_u64(s, &x) ? "" : fmt::format("{} is not a plain decimal integer >= 0", io::quoted(s));
      },
      "UINT");
}

CLI::Validator decimal_signed() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        int64_t x = 0;
        return io::parse_decimal_i64(s, &x) ? "" : fmt::format("{} is not a plain decimal integer", io::quoted(s));
      },
      "INT");
}

bool parse_size(const std::string& s, uint64_t* bytes) {
  if (s.empty()) return false;
  int shift = 0;
  std::string digits = s;
  switch (s.back()) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: break;
  }
  if (shift) digits.pop_back();
  uint64_t n = 0;
  if (!io::parse_decimal_u64(digits, &n) || n == 0 || n > (UINT64_MAX >> shift)) return false;
  *bytes = n << shift;
  return true;
}

std::string human_bytes(double b) {
  const char* unit[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  int i = 0;
  while (b >= 1024 && i < 6) b /= 1024, ++i;
  return fmt::format("{:.{}f} {}", b, i == 0 ? 0 : 1, unit[i]);
}

std::string human_seconds(double s) {
  if (s < 120) return fmt::format("{:.0f} s", s);
  if (s < 7200) return fmt::format("{:.0f} min", s / 60);
  if (s < 172800) return fmt::format("{:.0f} h", s / 3600);
  return fmt::format("{:.0f} days", s / 86400);
}

uint64_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : uint64_t(8) << 30;
}

// The certified oracle works per (batch, kv head) group on an (m, n_k) score matrix, m = the group's
// query rows: its peak memory is a few (m, n_k) double matrices (the exact product's high and low
// parts, a scratch slice product, P), and its time a per-score part (exponentials, compensated
// sums) plus a per-score-per-d part (the slice GEMMs). Measured with `flashcheck reference` on one
// core of this project's build machine (n = 512..4096, d = 16..128: 8-30 bytes and 90-440 ns per
// score), rounded up so that the estimate errs on the side of refusing. Groups of up to 2^22 scores
// run side by side on the oracle's threads (reference/parallel.hpp), larger ones one at a time with
// threads inside; the wall time assumes 70 % parallel efficiency.
Cost certified_cost(const Problem& p, bool grads) {
  const double group = double(p.heads_q / std::max(p.heads_kv, 1)) * p.n_q;  // m
  const double scores_group = group * p.n_k;
  const double groups = double(p.batch) * p.heads_kv;
  const double scores = scores_group * groups;
  const double tensors = double(numel_q(p)) * (grads ? 6 : 3) + double(numel_kv(p)) * (grads ? 8 : 4);
  const double threads = ref::worker_threads();
  const double per_score_ns = 150 + 3.0 * p.d;
  const double dtype_time = p.dtype == DType::F32 ? 1.5 : p.dtype == DType::F64 ? 1.8 : 1.0;
  const double dtype_memory = p.dtype == DType::F32 ? 1.15 : p.dtype == DType::F64 ? 1.3 : 1.0;
  const double at_once = scores_group <= double(1 << 22) ? std::min(groups, threads) : 1.0;  // groups in memory
  Cost c;
  c.bytes = (grads ? 26.0 : 14.0) * dtype_memory * scores_group * at_once + 8 * tensors + (64ull << 20);
  c.seconds = scores * per_score_ns * 1e-9 * dtype_time * (grads ? 1.0 : 0.75) / (1 + 0.7 * (threads - 1));
  return c;
}

void add_limit_options(CLI::App* sub, ResourceLimits& limits) {
  sub->add_option("--max-memory", limits.max_memory_text,
                  "refuse problems whose oracle run needs more memory (e.g. 64G; default 3/4 of this machine's)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            uint64_t b = 0;
            return parse_size(s, &b) ? "" : fmt::format("{} is not a size such as 512M, 16G or 1T", io::quoted(s));
          },
          "SIZE"));
  sub->add_option("--max-seconds", limits.max_seconds,
                  "refuse problems whose oracle run is estimated to take longer, in seconds (default 600)")
      ->check(decimal_unsigned());
}

void add_oracle_option(CLI::App* sub, std::string& text) {
  text = "auto";
  sub->add_option("--oracle", text,
                  "certified oracle: cpu, gpu (an error where the GPU oracle cannot run) or auto (default: the GPU "
                  "when a CUDA device is present and the problem is covered, fits and is not small)")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}));
}

void apply_oracle(const std::string& text) {
  ref::OracleKind kind = ref::OracleKind::Auto;
  if (!ref::parse_oracle(text, &kind)) throw UsageError(fmt::format("--oracle {}: expected cpu, gpu or auto", text));
  ref::set_oracle(kind);
}

// The GPU oracle's time: measured on the H200 (gpu_oracle_test "[.time]", copies included) for b 1,
// h 4, N 4096, d 128 bf16 forward and backward (6.7e7 scores) at 0.39 s; the estimate charges the
// 0.64 s of an earlier, slower build (about 9.5 ns per score at d = d_v = 128), erring on the side of
// refusing: per score (d + d_v + 32) · 3.7e-11 s (the 32: a score's fixed work, so that d = 1 is not
// free), forward alone 0.4 of that, plus a second for the device's start.
Cost oracle_cost(const Problem& p, bool grads, bool* gpu) {
  const bool on_gpu = ref::uses_gpu(ref::oracle(), p, grads);
  if (gpu) *gpu = on_gpu;
  if (!on_gpu) return certified_cost(p, grads);
  const double scores = double(p.heads_q) * p.n_q * double(p.n_k) * p.batch;
  const double tensors = double(numel_q(p)) * (grads ? 6 : 3) + double(numel_kv(p)) * (grads ? 8 : 4);
  Cost c;
  c.bytes = 8 * tensors * 2 + (64ull << 20);  // the inputs, the certificate, one staging copy
  c.seconds = scores * double(p.d + head_dim_v(p) + 32) * 3.7e-11 * (grads ? 1.0 : 0.4) + 1.0;
  return c;
}

Cost require_affordable(const std::string& file, const Problem& p, bool grads, const ResourceLimits& limits) {
  uint64_t max_memory = limits.max_memory ? limits.max_memory : physical_memory() / 4 * 3;
  if (!limits.max_memory_text.empty()) parse_size(limits.max_memory_text, &max_memory);
  const Cost c = oracle_cost(p, grads);
  const bool memory = c.bytes > double(max_memory), time = c.seconds > limits.max_seconds;
  if (!memory && !time) return c;
  std::string need;
  if (memory)
    need = fmt::format("about {} of memory (limit {}: --max-memory)", human_bytes(c.bytes),
                       human_bytes(double(max_memory)));
  if (time)
    need += fmt::format("{}about {} on {} threads (limit {}: --max-seconds)", memory ? " and " : "",
                        human_seconds(c.seconds), ref::worker_threads(), human_seconds(limits.max_seconds));
  throw io::FileError(io::FileFault::TooLarge, file,
                      fmt::format("batch={} heads_q={} heads_kv={} n_q={} n_k={} d={} {}{}: the certified oracle "
                                  "would need {}",
                                  p.batch, p.heads_q, p.heads_kv, p.n_q, p.n_k, p.d, dtypes_str(p),
                                  grads ? " with gradients" : "", need));
}

}  // namespace fc::cli
