#include "reports/cell.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "reference/parallel.hpp"
#include "reference/visibility.hpp"
#include "reports/json_num.hpp"
#include "reports/variant_plan.hpp"
#include "verdict/verdict.hpp"

namespace fc::report {

using nlohmann::json;

std::map<std::string, TensorMetrics> measure_outputs(const Inputs& checked, const ref::Certified& want,
                                                     const ref::Bounds& bounds, const Outputs& got, bool has_lse) {
  // The tensors the run is judged on, each with its verdict where there is a bound (verdict/).
  const std::vector<verdict::TensorVerdict> held = verdict::hold(checked, got, want, bounds, has_lse);
  // One tensor after another, each measure() on the oracle's threads in chunks of elements
  // (reference/parallel.hpp): the same bits with any thread count.
  std::vector<TensorMetrics> out(held.size());
  MeasureScratch scratch;  // one set of per-element arrays for every tensor
  for (size_t x = 0; x < held.size(); ++x) {
    const verdict::TensorVerdict& t = held[x];
    const std::string name = t.tensor;
    const Scale scale = name == "o"     ? Scale{Scale::Elementwise, &want.o_mag}
                        : name == "lse" ? Scale{Scale::Absolute}
                                        : Scale{Scale::TensorMax};
    TensorMetrics& m = out[x];
    m = measure(t.got, *t.ref, *t.bound, t.dtype, scale, &scratch);
    if (t.bound->empty()) continue;  // no bound, no verdict
    m.pass = t.held.ok, m.why = t.held.why, m.why_index = t.held.ok ? -1 : t.held.worst;
  }
  std::map<std::string, TensorMetrics> m;
  for (size_t x = 0; x < held.size(); ++x) m[held[x].tensor] = std::move(out[x]);
  return m;
}

BaselineErrors max_abs_of(const std::map<std::string, TensorMetrics>& m) {
  BaselineErrors b;
  for (const auto& [name, t] : m) b[name] = t.nonfinite_mismatch > 0 ? INFINITY : t.max_abs;
  return b;
}

namespace {

// The sequence of a packed token t and its row in the sequence (varlen: lengths as the case gives).
std::pair<int64_t, int64_t> sequence_of(const std::vector<int32_t>& lens, int64_t t) {
  int64_t b = 0;
  for (; b + 1 < int64_t(lens.size()) && t >= lens[size_t(b)]; ++b) t -= lens[size_t(b)];
  return {b, t};
}

// Padded varlen: the sequence whose tokens hold slot t and the row in it; {-1, t} for a padding slot.
std::pair<int64_t, int64_t> padded_sequence_of(const CaseSpec& c, bool keys, int64_t t) {
  const std::vector<int32_t> at = padded_starts(c, keys);
  const std::vector<int32_t>& len = keys ? c.len_k : c.len_q;
  for (size_t b = 0; b < len.size(); ++b)
    if (t >= at[b] && t < at[b] + len[b]) return {int64_t(b), t - at[b]};
  return {-1, t};
}

std::pair<int64_t, int64_t> token_of(const CaseSpec& c, bool keys, int64_t t) {
  const bool padded = c.p.padded && (keys ? c.pad_k : c.pad_q).size() == (keys ? c.len_k : c.len_q).size() + 1;
  return padded ? padded_sequence_of(c, keys, t) : sequence_of(keys ? c.len_k : c.len_q, t);
}

std::string seq_name(int64_t b) { return b < 0 ? "pad" : fmt::format("{}", b); }

}  // namespace

std::string element_label(const CaseSpec& c, const std::string& tensor, int64_t flat) {
  const Problem p = checked_problem(c);
  const int64_t offset = c.p.n_q - p.n_q;  // checked rows are the last ones (dense cases only)
  const bool kv = tensor == "d_k" || tensor == "d_v";
  const int64_t width = tensor == "lse" ? 1 : tensor == "o" || tensor == "d_v" ? head_dim_v(p) : p.d;
  const int64_t heads = kv ? p.heads_kv : p.heads_q;
  if (p.varlen && tensor == "lse") {  // (heads_q, total_q)
    const auto [b, i] = token_of(c, false, flat % p.total_q);
    return fmt::format("lse[b={},h={},i={}]", seq_name(b), flat / p.total_q, i);
  }
  const int64_t col = flat % width, h = flat / width % heads, row = flat / width / heads;
  if (kv && is_paged(p))  // (num_pages, page_size, heads_kv, width): a physical page's slot
    return fmt::format("{}[page={},slot={},h={},c={}]", tensor, row / p.page_size, row % p.page_size, h, col);
  if (p.varlen) {  // (total, heads, width): the packed token's sequence and row
    const auto [b, i] = token_of(c, kv, row);
    return fmt::format("{}[b={},h={},{}={},c={}]", tensor, seq_name(b), h, kv ? "j" : "i", i, col);
  }
  if (tensor == "lse") {
    const int64_t i = flat % p.n_q, hq = flat / p.n_q % p.heads_q, b = flat / p.n_q / p.heads_q;
    return fmt::format("lse[b={},h={},i={}]", b, hq, i + offset);
  }
  // (batch, heads, n, width): a cut's held keys are the last checked_keys(c) (plan.hpp)
  const int64_t n = kv ? checked_keys(c) : p.n_q, first = kv ? p.n_k - n : offset;
  const int64_t i = flat / width % n, hd = flat / width / n % heads, b = flat / width / n / heads;
  return fmt::format("{}[b={},h={},{}={},c={}]", tensor, b, hd, kv ? "j" : "i", i + first, col);
}

json tensor_json(const CaseSpec& c, const std::string& tensor, const TensorMetrics& m, const BaselineErrors* baseline) {
  json j = {{"count", m.count},
            {"nonfinite_mismatch", m.nonfinite_mismatch},
            {"nonfinite_match", m.nonfinite_match},
            {"max_abs", num(m.max_abs)},
            {"rmse", num(m.rmse)},
            {"max_scaled", num(m.max_scaled)},
            {"rel_norm", num(m.rel_norm)},
            {"bias", num(m.bias)},
            {"bias_mag", num(m.bias_mag)},
            {"bias_rel", num(m.bias_rel)},
            {"ulp_max", num(m.ulp_max)},
            {"ulp_mean", num(m.ulp_mean)},
            {"ulp_p99", num(m.ulp_p99)},
            {"excess_max", m.excess_max},
            {"excess_p99", m.excess_p99},
            {"correctly_rounded", m.correctly_rounded},
            {"ulp_hist", m.ulp_hist}};
  if (m.has_bound) {
    j["ratio"] = {
        {"max", num(m.ratio_max)}, {"p50", num(m.ratio_p50)}, {"p90", num(m.ratio_p90)}, {"p99", num(m.ratio_p99)}};
    j["ratio_hist"] = m.ratio_hist;
  }
  j["pass"] = m.pass;
  if (!m.pass) {
    j["why"] = m.why;
    if (m.why_index >= 0) j["why_element"] = element_label(c, tensor, m.why_index);
  }
  if (m.worst >= 0)
    j["worst"] = {{"element", element_label(c, tensor, m.worst)},
                  {"got", exact(m.worst_got)},
                  {"ref", num(m.worst_ref)},
                  {"bound", num(m.worst_bound)}};
  if (baseline) {
    if (auto it = baseline->find(tensor); it != baseline->end()) {
      j["baseline_max_abs"] = num(it->second);
      // kernel error over the baseline's: 0/0 (both exact) is 1, x/0 is inf
      const double r = m.max_abs == it->second ? 1.0 : m.max_abs / it->second;
      j["baseline_ratio"] = num(r);
    }
  }
  return j;
}

json case_json(const CaseSpec& c, uint64_t inputs_hash, double score_max_) {
  json j = {{"seq", c.seq},
            {"id", c.id},
            {"regime", c.regime},
            {"dtype", dtypes_str(c.p)},
            {"batch", c.p.batch},
            {"heads_q", c.p.heads_q},
            {"heads_kv", c.p.heads_kv},
            {"n_q", c.p.n_q},
            {"n_k", c.p.n_k},
            {"d", c.p.d},
            {"mask", mask_name(c.p.mask)},
            {"scale", exact(c.p.scale)},
            {"sigma", exact(c.sigma)},
            {"outliers", c.outliers},
            {"backward", c.backward},
            {"rows_checked", is_cut(c) ? c.rows : c.p.n_q},
            {"score_max", num(score_max_)},
            {"inputs_hash", fmt::format("{:016x}", inputs_hash)}};
  // A cut case: the keys whose d_k, d_v its rows hold (plan.hpp, checked_keys).
  if (is_cut(c) && c.backward) j["keys_checked"] = checked_keys(c);
  // A long case checked on every row: no same-precision baseline (baseline_runs).
  if (!baseline_runs(c)) j["baseline"] = "none: a CPU kernel on every row of this case would take hours";
  // The variants, present only where the case uses them (a dense case's object is as before).
  const Problem& p = c.p;
  if (head_dim_v(p) != p.d) j["d_v"] = head_dim_v(p);
  if (has_window(p)) j["window"] = {p.window_left, p.window_right};
  if (p.softcap > 0) j["softcap"] = exact(p.softcap);
  if (p.alibi) j["alibi"] = true;
  if (p.varlen) j["varlen"] = {{"len_q", c.len_q}, {"len_k", c.len_k}};
  if (is_paged(p)) j["paged"] = {{"page_size", p.page_size}, {"num_pages", p.num_pages}};
  if (!c.layout.empty()) j["layout"] = c.layout;
  if (p.sinks) {
    json sinks = json::array();
    for (double s : c.sinks) sinks.push_back(num(s));
    j["sinks"] = sinks;
  }
  if (p.padded) j["padded"] = {{"pad_q", c.pad_q}, {"pad_k", c.pad_k}};
  if (has_mask_tensor(p))
    j["mask_tensor"] = {{"kind", p.mask_kind == MaskKind::Bool ? "boolean" : "additive"},
                        {"dtype", p.mask_kind == MaskKind::Bool ? "BOOL" : dtype_name(p.mask_dtype)},
                        {"shape", {p.mask_b, p.mask_h, p.n_q, p.n_k}},
                        {"pattern", c.mask_pattern}};
  if (has_block_mask(p))
    j["block_mask"] = {
        {"block_q", p.block_q},
        {"block_k", p.block_k},
        {"shape", {p.block_b, p.block_h, (p.n_q + p.block_q - 1) / p.block_q, (p.n_k + p.block_k - 1) / p.block_k}},
        {"pattern", c.mask_pattern}};
  return j;
}

double score_max(const Inputs& in) {
  const Problem& p = in.p;
  const Seqs seqs = in.seqs();
  // Logical row-major order; rows through attention.h's q_row / kv_row (dense, varlen or paged).
  const std::vector<double> q = in.q.to_f64(), k = in.k.to_f64();
  // One task per (sequence, head), side by side: a maximum (NaN never taken) is the same whatever the
  // order its terms come in, so the result does not depend on the thread count.
  std::vector<double> m(size_t(p.batch * p.heads_q), 0.0);
  ref::parallel_for(p.batch * p.heads_q, [&](int64_t task) {
    const int64_t b = task / p.heads_q, h = task % p.heads_q;
    const int64_t n_q = seq_n_q(p, seqs, b), n_k = seq_n_k(p, seqs, b);
    double& mt = m[size_t(task)];
    for (int64_t i = std::max<int64_t>(0, n_q - 64); i < n_q; ++i) {
      const double* qi = &q[size_t(q_row(p, seqs, b, h, i) * p.d)];
      for (int64_t j = 0; j < n_k; ++j) {
        if (!ref::sees(p, i, j, n_q, n_k)) continue;
        const double* kj = &k[size_t(kv_row(p, seqs, b, kv_head(p, int32_t(h)), j) * p.d)];
        double s = 0;
        for (int64_t c = 0; c < p.d; ++c) s += qi[c] * kj[c];
        mt = std::max(mt, std::fabs(p.scale * s));
      }
    }
  });
  return m.empty() ? 0.0 : *std::max_element(m.begin(), m.end());
}

}  // namespace fc::report
