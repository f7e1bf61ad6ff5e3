// The flashcheck subcommands end to end, run as a subprocess: kernels --json, reference (the audit's
// commands: reports/tests).
#include "tests/catch.hpp"
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "cli/tests/subprocess.hpp"
#include "io/attention_io.hpp"
#include "reference/certified.hpp"
#include "reference/exact.hpp"

using namespace fc;
using namespace fc::cli::testing;
using nlohmann::json;

namespace {

Inputs random_inputs(const Problem& p, bool with_d_o, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  auto fill = [&](std::vector<int64_t> shape) {
    HostTensor x(p.dtype, std::move(shape));
    for (int64_t i = 0; i < x.numel(); ++i) x.set(i, u(rng));  // rounded to p.dtype
    return x;
  };
  Inputs in;
  in.p = p;
  in.q = fill(shape_q(p));                  // (batch, heads_q, n_q, d)
  in.k = fill(shape_kv(p));                 // (batch, heads_kv, n_k, d)
  in.v = fill(shape_kv(p));                 // (batch, heads_kv, n_k, d)
  if (with_d_o) in.d_o = fill(shape_q(p));  // (batch, heads_q, n_q, d)
  return in;
}

ref::Tensors64 as64(const Inputs& in) {
  return {in.q.to_f64(), in.k.to_f64(), in.v.to_f64(), in.has_d_o() ? in.d_o.to_f64() : std::vector<double>{}};
}

// |got - want| <= bound + the rounding of `want` (exact oracle rounded once to double: 2^-53 relative,
// taken as 2^-52 of the rounded value to cover the true one).
void check_within(const std::string& what, const HostTensor& got, const std::vector<double>& want,
                  const std::vector<double>& bound) {
  CAPTURE(what);
  REQUIRE(got.dtype == DType::F64);
  REQUIRE(size_t(got.numel()) == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got.get(int64_t(i));
    if (std::isinf(want[i])) {
      CHECK(g == want[i]);  // empty rows: lse = -inf exactly
      continue;
    }
    CAPTURE(i, g, want[i], bound[i]);
    CHECK(std::fabs(g - want[i]) <= bound[i] + std::ldexp(std::fabs(want[i]), -52));
  }
}

}  // namespace

TEST_CASE("flashcheck kernels --json lists the registry with cpu_naive and cpu_tiled", "[cpu]") {
  const RunResult r = run_flashcheck({"kernels", "--json"});
  REQUIRE(r.code == 0);
  const json j = json::parse(r.out);  // throws (fails the test) when not JSON
  std::set<std::string> names;
  for (const json& k : j.at("kernels")) {
    names.insert(k.at("name").get<std::string>());
    for (const char* field :
         {"device", "mutant", "dtypes", "masks", "backward", "gqa", "head_dims", "configs", "description"})
      CHECK(k.contains(field));
  }
  CHECK(names.count("cpu_naive") == 1);
  CHECK(names.count("cpu_tiled") == 1);
  const RunResult table = run_flashcheck({"kernels"});
  CHECK(table.code == 0);
  CHECK(table.out.find("cpu_tiled") != std::string::npos);
}

TEST_CASE("flashcheck reference writes certified F64 o, lse and gradients that match the exact oracle", "[cpu]") {
  const std::string dir = scratch_dir("reference");
  // F16 with d_o, GQA, n_q != n_k, bottom-right mask with an empty first row; and F32 forward only.
  const std::vector<std::pair<Problem, bool>> cases = {
      {Problem{1, 2, 1, 6, 4, 8, DType::F16, Mask::CausalBottomRight, 0.3}, true},
      {Problem{2, 1, 1, 5, 7, 3, DType::F32, Mask::None, default_scale(3)}, false},
  };
  for (const auto& [p, grads] : cases) {
    CAPTURE(dtype_name(p.dtype), grads);
    const Inputs in = random_inputs(p, grads, 42 + p.n_q);
    const std::string src = dir + "/in.safetensors", dst = dir + "/ref.safetensors";
    io::write_safetensors(src, io::inputs_file(in));
    const RunResult r = run_flashcheck({"reference", "--inputs", src, "--out", dst, "--oracle", "cpu"});
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    const io::TensorFile f = io::read_safetensors(dst);
    CHECK(f.metadata.at("mask") == mask_name(p.mask));
    CHECK(std::stod(f.metadata.at("scale")) == p.scale);
    CHECK(f.metadata.at("oracle") == "certified");
    CHECK(f.tensors.at("o").shape == shape_q(p));
    CHECK(f.tensors.at("lse").shape == shape_lse(p));
    CHECK(f.tensors.count("d_q") == size_t(grads));

    // The file holds exactly what the certified oracle computes in-process (plumbing is lossless)...
    const ref::Certified cert = ref::certified(p, as64(in));
    CHECK(f.tensors.at("o").to_f64() == cert.value.o);
    // ...and that is within the oracle's own bound of the independent 256-bit exact oracle.
    const ref::Result64 exact = ref::exact(p, as64(in), 256);
    check_within("o", f.tensors.at("o"), exact.o, cert.err.o);
    check_within("lse", f.tensors.at("lse"), exact.lse, cert.err.lse);
    if (grads) {
      check_within("d_q", f.tensors.at("d_q"), exact.d_q, cert.err.d_q);
      check_within("d_k", f.tensors.at("d_k"), exact.d_k, cert.err.d_k);
      check_within("d_v", f.tensors.at("d_v"), exact.d_v, cert.err.d_v);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("flashcheck reference gives the closed form when every key is the same", "[cpu]") {
  // Identical keys: every score of a row is equal, P_ij = 1/4, o_i = mean_j v_j = [4, 5] exactly,
  // lse_i = scale q_i.k + log 4.
  const std::string dir = scratch_dir("closed_form");
  Inputs in;
  in.p = Problem{1, 1, 1, 2, 4, 2, DType::F32, Mask::None, 0.5};
  in.q = HostTensor::from_f64(DType::F32, shape_q(in.p), {1, 2, -3, 0.25});                   // (1, 1, 2, 2)
  in.k = HostTensor::from_f64(DType::F32, shape_kv(in.p), {1, 0.5, 1, 0.5, 1, 0.5, 1, 0.5});  // (1, 1, 4, 2)
  in.v = HostTensor::from_f64(DType::F32, shape_kv(in.p), {1, 2, 3, 4, 5, 6, 7, 8});          // (1, 1, 4, 2)
  io::write_safetensors(dir + "/in.safetensors", io::inputs_file(in));
  const RunResult r =
      run_flashcheck({"reference", "--inputs", dir + "/in.safetensors", "--out", dir + "/ref.safetensors", "--oracle", "cpu"});
  REQUIRE(r.code == 0);
  const io::TensorFile f = io::read_safetensors(dir + "/ref.safetensors");
  const ref::Certified cert = ref::certified(in.p, as64(in));
  // s_0 = 0.5 (1 + 1) = 1, s_1 = 0.5 (-3 + 0.125) = -1.4375, both exact; log 4 = 2 log 2.
  const double lse0 = 1 + 2 * std::log(2.0), lse1 = -1.4375 + 2 * std::log(2.0);
  // The closed-form lse itself carries std::log's and one addition's rounding: 2^-51 relative covers both.
  const std::vector<double> lse_bound = {cert.err.lse[0] + std::ldexp(std::fabs(lse0), -51),
                                         cert.err.lse[1] + std::ldexp(std::fabs(lse1), -51)};
  check_within("o", f.tensors.at("o"), {4, 5, 4, 5}, cert.err.o);
  check_within("lse", f.tensors.at("lse"), {lse0, lse1}, lse_bound);
  std::filesystem::remove_all(dir);
}
