// flashcheck compare as a subprocess on files written here: a correct kernel's outputs pass, a
// planted error fails naming its element, malformed or inconsistent files exit 2 with one line.
#include "tests/catch.hpp"
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/tests/subprocess.hpp"
#include "io/atomic_file.hpp"
#include "io/attention_io.hpp"
#include "io/safetensors.hpp"
#include "kernels/registry.hpp"
#include "reports/plan.hpp"

using namespace fc;
using namespace fc::cli::testing;
using nlohmann::json;

namespace {

struct Files {
  std::string dir, inputs, outputs;
  Inputs in;
  Outputs out;
};

// A GQA causal problem with gradients, its inputs and cpu_tiled's outputs on disk.
Files make_files(const std::string& tag) {
  Files f;
  f.dir = scratch_dir(tag);
  report::CaseSpec c;
  c.id = "compare-test";
  c.p = Problem{1, 4, 2, 48, 80, 64, DType::F16, Mask::CausalBottomRight, default_scale(64)};
  c.backward = true;
  f.in = report::make_inputs(c, 7);
  f.out = run_forward_backward(*find_kernel("cpu_tiled"), f.in);
  f.inputs = f.dir + "/in.safetensors", f.outputs = f.dir + "/out.safetensors";
  io::write_file_atomic(f.inputs, io::serialize_safetensors(io::inputs_file(f.in)));
  io::write_outputs(f.outputs, f.out, {});
  return f;
}

RunResult compare(const Files& f, const std::string& outputs, std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"compare", "--inputs", f.inputs, "--outputs", outputs};
  args.insert(args.end(), more.begin(), more.end());
  return run_flashcheck(args, 120);
}

}  // namespace

TEST_CASE("compare passes a correct kernel's outputs and fails a planted error at its element", "[cpu]") {
  Files f = make_files("compare_ok");
  const RunResult ok =
      compare(f, f.outputs, {"--name", "cpu_tiled_file", "--rounding", "nearest", "--out", f.dir + "/r"});
  CAPTURE(ok.out, ok.err);
  CHECK(ok.code == 0);
  std::ifstream rf(f.dir + "/r/report.json");
  const json r = json::parse(rf);
  CHECK(r["kind"] == "compare");
  REQUIRE(r["cells"].size() == 1);
  const json& cell = r["cells"][0];
  CHECK(cell["kernel"] == "cpu_tiled_file");
  for (const char* t : {"o", "lse", "d_q", "d_k", "d_v"}) CHECK(cell["tensors"].contains(t));

  // o[b=0,h=1,i=40,c=3] off by 0.25: far beyond any fp16 bound.
  Outputs bad = f.out;
  const int64_t flat = offset_q(f.in.p, 0, 1, 40) + 3;
  bad.o.set(flat, bad.o.get(flat) + 0.25);
  io::write_outputs(f.dir + "/bad.safetensors", bad, {});
  const RunResult fail = compare(f, f.dir + "/bad.safetensors");
  CHECK(fail.code == 1);
  CHECK(fail.out.find("o[b=0,h=1,i=40,c=3]") != std::string::npos);

  // The baseline past its time budget is left out: the same verdict and bounds, no baseline columns,
  // and the cell says why.
  const RunResult nob =
      compare(f, f.outputs, {"--rounding", "nearest", "--max-baseline-seconds", "0", "--out", f.dir + "/nb"});
  CHECK(nob.code == 0);
  std::ifstream nf(f.dir + "/nb/report.json");
  const json rn = json::parse(nf);
  const json& cn = rn["cells"][0];
  CHECK(cn["baseline_skipped"].get<std::string>().find("--max-baseline-seconds 0") != std::string::npos);
  CHECK_FALSE(cell.contains("baseline_skipped"));
  for (const char* t : {"o", "lse", "d_q", "d_k", "d_v"}) {
    CHECK(cell["tensors"][t].contains("baseline_ratio"));
    CHECK_FALSE(cn["tensors"][t].contains("baseline_ratio"));
    CHECK(cn["tensors"][t]["ratio"] == cell["tensors"][t]["ratio"]);
  }
  // Outputs of the forward alone (o and lse): o and lse judged against the forward's bound, the same
  // numbers as with the gradients beside them; the planted error still fails.
  Outputs fwd = f.out;
  fwd.d_q = fwd.d_k = fwd.d_v = HostTensor();
  io::write_outputs(f.dir + "/fwd.safetensors", fwd, {});
  const RunResult fo = compare(f, f.dir + "/fwd.safetensors", {"--rounding", "nearest", "--out", f.dir + "/fw"});
  CAPTURE(fo.out, fo.err);
  CHECK(fo.code == 0);
  std::ifstream ff(f.dir + "/fw/report.json");
  const json rf_fwd = json::parse(ff);
  const json& cf = rf_fwd["cells"][0];
  CHECK(cf["tensors"].size() == 2);
  for (const char* t : {"o", "lse"}) CHECK(cf["tensors"][t]["ratio"] == cell["tensors"][t]["ratio"]);
  Outputs fwd_bad = bad;
  fwd_bad.d_q = fwd_bad.d_k = fwd_bad.d_v = HostTensor();
  io::write_outputs(f.dir + "/fwd_bad.safetensors", fwd_bad, {});
  const RunResult fb = compare(f, f.dir + "/fwd_bad.safetensors");
  CHECK(fb.code == 1);
  CHECK(fb.out.find("o[b=0,h=1,i=40,c=3]") != std::string::npos);
  const RunResult neg = compare(f, f.outputs, {"--max-baseline-seconds", "-1"});
  CHECK(neg.code == 2);
  CHECK(neg.stderr_lines() == 1);
  std::filesystem::remove_all(f.dir);
}

TEST_CASE("compare refuses unusable outputs with exit 2 and one line", "[cpu]") {
  Files f = make_files("compare_bad");
  auto variant = [&](const std::string& name, auto edit) {
    io::TensorFile file = io::outputs_file(f.out, {});
    edit(file);
    const std::string path = f.dir + "/" + name + ".safetensors";
    io::write_file_atomic(path, io::serialize_safetensors(file));
    return path;
  };
  const std::vector<std::string> bad = {
      variant("no_o", [](io::TensorFile& t) { t.tensors.erase("o"); }),
      variant("extra", [](io::TensorFile& t) { t.tensors["attn"] = t.tensors["lse"]; }),
      variant("lse_f16", [](io::TensorFile& t) { t.tensors["lse"] = HostTensor(DType::F16, t.tensors["lse"].shape); }),
      variant("o_shape",
              [](io::TensorFile& t) {
                t.tensors["o"] = HostTensor(DType::F16, {1, 4, 47, 64});
              }),
      variant("grads_part", [](io::TensorFile& t) { t.tensors.erase("d_k"); }),
      f.dir + "/absent.safetensors",
  };
  for (const std::string& path : bad) {
    const RunResult r = compare(f, path);
    CAPTURE(path, r.out, r.err);
    CHECK(r.code == 2);
    CHECK(r.stderr_lines() == 1);
  }
  const RunResult opt = compare(f, f.outputs, {"--model", "magic"});
  CHECK(opt.code == 2);
  std::filesystem::remove_all(f.dir);
}
