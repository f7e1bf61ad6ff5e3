// Small hand-made reports for the gate and merge tests: cells whose metrics are set by hand, so a
// test can plant a regression and know exactly what the gate must say.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "reports/report.hpp"

namespace fc::report::testing {

// A tensor's metrics: every gated metric set from `err` (rmse = err, max_abs = 4 err, ratio max =
// 10 err, ...), bias_mag = bias, count elements.
inline nlohmann::json tensor(double err, double bias = 0, int64_t count = 10000, bool pass = true) {
  return {{"count", count},
          {"nonfinite_mismatch", 0},
          {"max_abs", 4 * err},
          {"rmse", err},
          {"max_scaled", 2 * err},
          {"rel_norm", err},
          {"bias", bias},
          {"bias_mag", bias},
          {"bias_rel", err > 0 ? bias / err : 0.0},
          {"ulp_max", 3.0},
          {"ulp_p99", 1.0},
          {"ulp_mean", 0.3},
          {"excess_max", 2},
          {"excess_p99", 1},
          {"correctly_rounded", count / 2},
          {"ratio", {{"max", 10 * err}, {"p50", err}, {"p90", 2 * err}, {"p99", 5 * err}}},
          {"pass", pass}};
}

inline nlohmann::json cell(int seq, int sub, const std::string& kernel, const std::string& case_id, double err,
                           const std::string& status = "pass") {
  return {{"seq", seq},      {"sub", sub},       {"kernel", kernel},
          {"case", case_id}, {"status", status}, {"tensors", {{"o", tensor(err, 0, 10000, status == "pass")}}}};
}

inline nlohmann::json case_(int seq, const std::string& id, const std::string& hash = "00000000000000aa") {
  return {{"seq", seq}, {"id", id},  {"dtype", "F16"},     {"regime", "normal"},
          {"n_q", 64},  {"n_k", 64}, {"inputs_hash", hash}};
}

// Two cases x two kernels, every cell passing with o rmse 1e-4.
inline nlohmann::json small_report() {
  nlohmann::json cases = {case_(0, "F16/normal/n16"), case_(1, "F16/normal/n64")};
  nlohmann::json cells = {cell(0, 0, "k0", "F16/normal/n16", 1e-4), cell(0, 1, "k1", "F16/normal/n16", 1e-4),
                          cell(1, 0, "k0", "F16/normal/n64", 1e-4), cell(1, 1, "k1", "F16/normal/n64", 1e-4)};
  return make_report("audit", {{"seed", 1}}, cases, cells, nlohmann::json::array());
}

}  // namespace fc::report::testing
