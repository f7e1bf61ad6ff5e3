#include "reports/run.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <Eigen/Core>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include "reference/gpu/oracle_select.hpp"
#include "verdict/verdict.hpp"

namespace fc::report {

using nlohmann::json;

namespace {

std::mutex g_exclusive;  // subjects that run one at a time (a GPU, a plugin's child)

// The checked rows of a subject's full-problem outputs: o, lse and d_q of the checked problem; d_k
// and d_v as they are (key_cut keeps the keys the checked rows hold whole).
Outputs rows_of(const CaseSpec& c, Outputs full) {
  if (!is_cut(c)) return full;
  const Problem p = checked_problem(c);
  Outputs out;
  out.o = HostTensor::from_f64(full.o.dtype, shape_o(p), checked_rows(c, full.o.to_f64(), head_dim_v(c.p)));
  out.lse = HostTensor::from_f64(full.lse.dtype, shape_lse(p), checked_rows(c, full.lse.to_f64(), 1));
  if (full.has_grads()) {
    out.d_q = HostTensor::from_f64(full.d_q.dtype, shape_q(p), checked_rows(c, full.d_q.to_f64(), c.p.d));
    out.d_k = std::move(full.d_k), out.d_v = std::move(full.d_v);
  }
  return out;
}

// d_k, d_v (the full problem's or the checked problem's: the same keys) cut to checked_keys(c), in
// place: emptied where there is none, so they are not held.
void key_cut(const CaseSpec& c, HostTensor& t, int64_t width) {
  if (t.shape.empty() || checked_keys(c) == c.p.n_k) return;
  if (checked_keys(c) == 0) {
    t = HostTensor{};
    return;
  }
  const std::vector<int64_t> shape = {c.p.batch, c.p.heads_kv, checked_keys(c), width};  // long cases are dense
  t = HostTensor::from_f64(t.dtype, shape, checked_key_rows(c, t.to_f64(), width));
}
void key_cut(const CaseSpec& c, std::vector<double>& v, int64_t width) {
  if (!v.empty()) v = checked_key_rows(c, v, width);
  if (checked_keys(c) == 0) v.clear();
}

// Progress on stderr: nothing for runs under a few seconds, then a line every few seconds
// (rewritten in place on a terminal).
class SweepProgress {
 public:
  SweepProgress(bool on, std::string what, size_t total)
      : on_(on), what_(std::move(what)), total_(total), tty_(isatty(2)), start_(now()), last_(start_) {}
  void done(const std::string& id) {
    std::lock_guard<std::mutex> lock(m_);
    ++done_;
    const double t = now();
    if (!on_ || t - start_ < 3 || t - last_ < (tty_ ? 1 : 5)) return;
    last_ = t, printed_ = true;
    const double left = (t - start_) / double(done_) * double(total_ - done_);
    std::fprintf(stderr, "%sflashcheck %s: %zu/%zu cases, %.0f s, about %.0f s left (%s)%s", tty_ ? "\r\033[K" : "",
                 what_.c_str(), done_, total_, t - start_, left, id.c_str(), tty_ ? "" : "\n");
  }
  ~SweepProgress() {
    if (printed_)
      std::fprintf(stderr, "%sflashcheck %s: %zu cases in %.0f s\n", tty_ ? "\r\033[K" : "", what_.c_str(), done_,
                   now() - start_);
  }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  bool on_;
  std::string what_;
  size_t total_, done_ = 0;
  bool tty_, printed_ = false;
  double start_, last_;
  std::mutex m_;
};

}  // namespace

CellRun run_cell(const CaseSpec& c, const Inputs& full, const Inputs& checked, const ref::Tensors64* checked64,
                 const ref::Certified& want, const Subject& s) {
  CellRun r;
  r.cell = {{"seq", c.seq}, {"case", c.id}, {"kernel", s.name}, {"device", s.device}, {"config", s.config}};
  Outputs got;
  try {
    const bool backward = s.backward && c.backward;
    std::unique_lock<std::mutex> lock(g_exclusive, std::defer_lock);
    if (s.exclusive) lock.lock();
    got = s.cut_rows ? s.run(checked, backward) : rows_of(c, s.run(full, backward));
  } catch (const Refusal& e) {
    // A listed tile this shape does not admit is a declared refusal, not a wrong answer.
    r.cell["status"] = "refused";
    r.cell["error"] = e.what();
    return r;
  } catch (const std::exception& e) {
    r.cell["status"] = "error";
    r.cell["error"] = e.what();
    return r;
  }
  ref::Bounds bounds =
      checked64 ? verdict::bounds_for(checked, *checked64, want, s.precision(checked.p)) : ref::Bounds{};
  if (checked_keys(c) == c.p.n_k) {
    r.metrics = measure_outputs(checked, want, bounds, got, s.writes_lse);
  } else {  // the d_k, d_v rows of the keys the checked rows hold whole (none without a causal mask)
    const int64_t d = c.p.d, dv = head_dim_v(c.p);
    ref::Certified held = want;
    for (ref::Result64* r64 : {&held.value, &held.err}) key_cut(c, r64->d_k, d), key_cut(c, r64->d_v, dv);
    key_cut(c, bounds.d_k, d), key_cut(c, bounds.d_v, dv);
    key_cut(c, got.d_k, d), key_cut(c, got.d_v, dv);
    r.metrics = measure_outputs(checked, held, bounds, got, s.writes_lse);
  }
  bool pass = true;
  for (const auto& [name, m] : r.metrics) pass = pass && m.pass;
  r.cell["status"] = pass ? "pass" : "fail";
  return r;
}

json finish_cell(const CaseSpec& c, const CellRun& r, const BaselineErrors* baseline) {
  json cell = r.cell;
  if (r.metrics.empty()) return cell;
  json tensors = json::object();
  for (const char* name : kTensors)
    if (auto it = r.metrics.find(name); it != r.metrics.end())
      tensors[name] = tensor_json(c, name, it->second, baseline);
  cell["tensors"] = tensors;
  return cell;
}

void whole_long_rows(std::vector<CaseSpec>& cases, const std::vector<Subject>& subjects) {
  for (CaseSpec& c : cases) {
    if (!c.gpu_only || !is_cut(c)) continue;
    CaseSpec whole = c;
    whole.rows = 0;
    std::vector<ref::Precision> precs;
    for (const Subject& s : subjects)
      if (s.claims(whole)) precs.push_back(s.precision(whole.p));
    if (!precs.empty() && ref::bounds_on_gpu(ref::oracle(), whole.p, whole.backward, precs)) c = whole;
  }
}

SweepResult run_sweep(const std::vector<CaseSpec>& cases, const std::vector<Subject>& subjects, const Subject* baseline,
                      const SweepOptions& o) {
  // Eigen sizes its GEMM blocks from the CPU's caches, and the blocking decides the summation order
  // of the baseline's and the oracle's inexact products: fixed sizes make the report the same on
  // every machine.
  Eigen::setCpuCacheSizes(32 * 1024, 1024 * 1024, 8 * 1024 * 1024);
  const size_t n = cases.size();
  std::vector<json> case_js(n), cell_js(n, json::array());
  std::vector<std::string> errors(n);
  std::atomic<size_t> next{0};
  SweepProgress progress(o.progress, o.what, n);
  auto one = [&](size_t i) {
    const CaseSpec& c = cases[i];
    const Inputs full = make_inputs(c, o.seed);
    const Inputs checked = checked_inputs(c, full);
    const ref::Tensors64 checked64 = verdict::tensors64(checked);
    const ref::Certified want = verdict::certify(checked, checked64);
    std::vector<CellRun> runs(subjects.size());
    const CellRun* base_run = nullptr;
    for (size_t k = 0; k < subjects.size(); ++k) {
      if (!subjects[k].claims(c)) continue;
      runs[k] = run_cell(c, full, checked, &checked64, want, subjects[k]);
      if (baseline && subjects[k].name == baseline->name && subjects[k].config == baseline->config) base_run = &runs[k];
    }
    CellRun separate;
    if (baseline && !base_run && baseline_runs(c) && baseline->claims(c)) {
      separate = run_cell(c, full, checked, nullptr, want, *baseline);
      base_run = &separate;
    }
    BaselineErrors base;
    if (base_run) base = max_abs_of(base_run->metrics);
    case_js[i] = case_json(c, inputs_hash(full), score_max(checked));
    for (size_t k = 0; k < subjects.size(); ++k) {
      if (runs[k].cell.is_null()) continue;
      json cell = finish_cell(c, runs[k], base.empty() ? nullptr : &base);
      cell["sub"] = k;
      if (o.replay) cell["replay"] = o.replay(c, subjects[k]);
      cell_js[i].push_back(std::move(cell));
    }
  };
  auto worker = [&] {
    for (size_t i; (i = next++) < n;) {
      try {
        one(i);
      } catch (const std::exception& e) {
        errors[i] = fmt::format("{}: {}", cases[i].id, e.what());
      }
      progress.done(cases[i].id);
    }
  };
  std::vector<std::thread> pool;
  const int jobs = std::max(1, std::min<int>(o.jobs, int(n)));
  for (int t = 1; t < jobs; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  SweepResult r;
  for (size_t i = 0; i < n; ++i) {
    if (!errors[i].empty()) {
      r.errors.push_back(errors[i]);
      continue;
    }
    r.cases.push_back(std::move(case_js[i]));
    for (json& cell : cell_js[i]) r.cells.push_back(std::move(cell));
  }
  return r;
}

}  // namespace fc::report
