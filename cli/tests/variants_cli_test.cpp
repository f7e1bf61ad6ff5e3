// `flashcheck reference` on variant input files (contract v2): each malformed variant file exits 2
// with one line naming the file and the problem and leaves no output; each good one writes the
// certified o, lse and gradients in the variant's layout with the variant's metadata, within the
// oracle's own bound of the 256-bit exact oracle; `flashcheck compare` judges the same files.
#include "tests/catch.hpp"
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/tests/subprocess.hpp"
#include "io/attention_io.hpp"
#include "io/tests/variant_files.hpp"
#include "kernels/registry.hpp"
#include "reference/certified.hpp"
#include "reference/exact.hpp"
#include "reference/inputs64.hpp"

using namespace fc;
using namespace fc::cli::testing;

TEST_CASE("flashcheck reference exits 2 with one line on each malformed variant file", "[cpu]") {
  const std::string dir = scratch_dir("variant_malformed");
  for (const io::testing::BadVariantCase& c : io::testing::malformed_variant_cases()) {
    CAPTURE(c.label);
    const std::string in = dir + "/" + c.label + ".safetensors", out = dir + "/" + c.label + ".out.safetensors";
    write_bytes(in, c.bytes);
    const RunResult r = run_flashcheck({"reference", "--inputs", in, "--out", out}, 20);
    CAPTURE(r.err);
    CHECK(r.code == 2);
    CHECK(r.stderr_lines() == 1);
    CHECK(r.err.find(in) != std::string::npos);
    CHECK(r.err.find(c.mention) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(out));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("flashcheck reference on variant files writes the variant's layout within bound of the exact oracle",
          "[cpu]") {
  const std::string dir = scratch_dir("variant_reference");
  for (const io::testing::GoodVariant& g : io::testing::good_variants()) {
    CAPTURE(g.label);
    const Problem& p = g.in.p;
    const std::string src = dir + "/in.safetensors", dst = dir + "/ref.safetensors";
    io::write_safetensors(src, io::inputs_file(g.in));
    const RunResult r = run_flashcheck({"reference", "--inputs", src, "--out", dst, "--oracle", "cpu"});
    CAPTURE(r.err);
    REQUIRE(r.code == 0);
    const io::TensorFile f = io::read_safetensors(dst);
    for (const auto& [key, value] : io::problem_metadata(p)) CHECK(f.metadata.at(key) == value);
    CHECK(f.tensors.at("o").shape == shape_o(p));
    CHECK(f.tensors.at("lse").shape == shape_lse(p));
    CHECK(f.tensors.at("d_q").shape == shape_q(p));
    CHECK(f.tensors.at("d_k").shape == shape_kv(p));
    CHECK(f.tensors.at("d_v").shape == shape_v(p));
    const ref::Tensors64 in64 = ref::tensors64(g.in);
    const ref::Certified cert = ref::certified(p, in64);
    const ref::Result64 exact = ref::exact(p, in64, 256);
    for (auto [name, want, bound] :
         {std::tuple{"o", &exact.o, &cert.err.o}, std::tuple{"lse", &exact.lse, &cert.err.lse},
          std::tuple{"d_q", &exact.d_q, &cert.err.d_q}, std::tuple{"d_k", &exact.d_k, &cert.err.d_k},
          std::tuple{"d_v", &exact.d_v, &cert.err.d_v}}) {
      CAPTURE(name);
      const std::vector<double> got = f.tensors.at(name).to_f64();
      REQUIRE(got.size() == want->size());
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        if (std::isinf((*want)[i]))
          CHECK(got[i] == (*want)[i]);  // rows that see no key: lse = -inf exactly
        else                            // the exact value is rounded once to double: 2^-52 of it covers the true one
          CHECK(std::fabs(got[i] - (*want)[i]) <= (*bound)[i] + 0x1p-52 * std::fabs((*want)[i]));
      }
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("flashcheck kernels --json lists each kernel's variants: every one for the CPU kernels", "[cpu]") {
  Variants naive = all_variants();
  naive.sinks = false;  // cpu_naive declines sinks (kernels/cpu/register.cpp)
  const RunResult r = run_flashcheck({"kernels", "--json"});
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const nlohmann::json& k : j.at("kernels")) {
    const std::string name = k.at("name");
    CAPTURE(name);
    REQUIRE(k.contains("variants"));
    if (name == "cpu_tiled") CHECK(k.at("variants") == nlohmann::json(variant_names(all_variants())));
    if (name == "cpu_naive") CHECK(k.at("variants") == nlohmann::json(variant_names(naive)));
    if (k.at("device") == "cuda") CHECK(k.at("variants").empty());
  }
}

TEST_CASE("flashcheck compare judges variant files: cpu_tiled's outputs pass, a planted error fails", "[cpu]") {
  const std::string dir = scratch_dir("variant_compare");
  for (const io::testing::GoodVariant& g : io::testing::good_variants()) {
    CAPTURE(g.label);
    const std::string in = dir + "/in.safetensors", out = dir + "/out.safetensors", bad = dir + "/bad.safetensors";
    io::write_safetensors(in, io::inputs_file(g.in));
    const Outputs o = run_forward_backward(*find_kernel("cpu_tiled"), g.in);
    io::write_outputs(out, o, {});
    const RunResult ok = run_flashcheck({"compare", "--inputs", in, "--outputs", out, "--rounding", "nearest"}, 120);
    CAPTURE(ok.out, ok.err);
    CHECK(ok.code == 0);
    if (o.o.numel() == 0) continue;  // a batch without queries has no o to plant an error in
    Outputs wrong = o;
    wrong.o.set(0, wrong.o.get(0) + 0.25);  // far beyond any bound
    io::write_outputs(bad, wrong, {});
    const RunResult fail = run_flashcheck({"compare", "--inputs", in, "--outputs", bad, "--rounding", "nearest"}, 120);
    CAPTURE(fail.out, fail.err);
    CHECK(fail.code == 1);
  }
  std::filesystem::remove_all(dir);
}
