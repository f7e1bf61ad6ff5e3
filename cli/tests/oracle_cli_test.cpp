// `--oracle cpu|gpu|auto` end to end (reference/gpu/oracle_select.hpp): bad values and `gpu` where the
// GPU oracle cannot run are one line and exit 2; cpu and auto answer. Runs with or without a GPU: where
// the GPU oracle runs, `gpu` must answer too, within the CPU's certificate's reach.
#include "tests/catch.hpp"

#include <cmath>
#include <filesystem>

#include "cli/tests/subprocess.hpp"
#include "io/attention_io.hpp"

using namespace fc;
using namespace fc::cli::testing;

namespace {

// wide: head dim 260, past the GPU oracle's 256 (a problem it never covers).
Inputs oracle_inputs(bool wide) {
  Inputs in;
  in.p = Problem{1, 2, 1, 5, 6, wide ? 260 : 4, DType::F16, Mask::CausalTopLeft, 0.5};
  in.q = HostTensor(DType::F16, shape_q(in.p));
  in.k = HostTensor(DType::F16, shape_kv(in.p));
  in.v = HostTensor(DType::F16, shape_kv(in.p));
  in.d_o = HostTensor(DType::F16, shape_q(in.p));
  for (int64_t i = 0; i < in.q.numel(); ++i) in.q.set(i, double(i % 7) / 4 - 0.75), in.d_o.set(i, double(i % 4) / 2 - 0.5);
  for (int64_t i = 0; i < in.k.numel(); ++i) in.k.set(i, double(i % 5) / 4 - 0.5), in.v.set(i, double(i % 3) - 1);
  return in;
}

void one_line_exit_2(const RunResult& r, const std::string& mention) {
  CAPTURE(r.err, r.out);
  CHECK(r.code == 2);
  CHECK(r.stderr_lines() == 1);
  CHECK(r.err.find(mention) != std::string::npos);
}

TEST_CASE("oracle option: a value other than cpu, gpu, auto is one line, exit 2, on every command", "[cpu]") {
  const std::string dir = scratch_dir("oracle_bad");
  const std::string in = dir + "/in.safetensors";
  io::write_safetensors(in, io::inputs_file(oracle_inputs(false)));
  for (const char* bad : {"GPU", "cuda", "", "cpu,gpu"}) {
    CAPTURE(bad);
    one_line_exit_2(run_flashcheck({"reference", "--inputs", in, "--out", dir + "/o.safetensors", "--oracle", bad}),
                    "--oracle");
    one_line_exit_2(run_flashcheck({"check", "--kernel", "cpu_tiled", "--cases", "1", "--oracle", bad}), "--oracle");
    one_line_exit_2(run_flashcheck({"compare", "--inputs", in, "--outputs", in, "--oracle", bad}), "--oracle");
    one_line_exit_2(run_flashcheck({"audit", "--quick", "--oracle", bad}), "--oracle");
    one_line_exit_2(run_flashcheck({"fuzz", "--kernel", "cpu_tiled", "--cases", "1", "--oracle", bad}), "--oracle");
  }
  CHECK_FALSE(std::filesystem::exists(dir + "/o.safetensors"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("oracle option: cpu and auto answer, and gpu answers or names what is missing", "[cpu]") {
  const std::string dir = scratch_dir("oracle_choice");
  const std::string in = dir + "/in.safetensors", wide = dir + "/wide.safetensors";
  io::write_safetensors(in, io::inputs_file(oracle_inputs(false)));
  io::write_safetensors(wide, io::inputs_file(oracle_inputs(true)));
  for (const char* kind : {"cpu", "auto"}) {
    CAPTURE(kind);
    for (const std::string& file : {in, wide}) {
      const RunResult r = run_flashcheck({"reference", "--inputs", file, "--out", dir + "/o.safetensors", "--oracle", kind});
      CAPTURE(r.err);
      CHECK(r.code == 0);
    }
  }
  // Head dim 260: the GPU oracle never covers it, whatever the machine: one line naming why.
  const RunResult wide_gpu =
      run_flashcheck({"reference", "--inputs", wide, "--out", dir + "/g.safetensors", "--oracle", "gpu"});
  one_line_exit_2(wide_gpu, "--oracle gpu: ");
  const bool named = wide_gpu.err.find("head dims past 256") != std::string::npos ||
                     wide_gpu.err.find("no CUDA device") != std::string::npos ||
                     wide_gpu.err.find("without CUDA") != std::string::npos;
  CHECK(named);
  CHECK_FALSE(std::filesystem::exists(dir + "/g.safetensors"));
  // A dense problem: the GPU's answer where it runs, else the reason (no device, or a CPU-only build).
  const RunResult dense = run_flashcheck({"reference", "--inputs", in, "--out", dir + "/g.safetensors", "--oracle", "gpu"});
  if (dense.code == 0) {
    const io::TensorFile f = io::read_safetensors(dir + "/g.safetensors");
    for (double x : f.tensors.at("d_k").to_f64()) CHECK(std::isfinite(x));
  } else {
    one_line_exit_2(dense, "--oracle gpu: ");
    const bool why = dense.err.find("no CUDA device") != std::string::npos ||
                     dense.err.find("without CUDA") != std::string::npos;
    CHECK(why);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("oracle option: fuzz takes cpu, and gpu answers or is one line naming what is missing", "[cpu]") {
  const RunResult cpu = run_flashcheck({"fuzz", "--kernel", "cpu_tiled", "--cases", "256", "--oracle", "cpu"});
  CAPTURE(cpu.err, cpu.out);
  CHECK(cpu.code == 0);
  CHECK(cpu.out.find("0 failed") != std::string::npos);
  // Without a device every case would be refused: the campaign is refused before it starts, never a
  // failing case of the kernel's. With one, a variant the GPU oracle does not cover stops it the same way.
  const RunResult gpu = run_flashcheck({"fuzz", "--kernel", "cpu_tiled", "--cases", "256", "--oracle", "gpu"});
  CAPTURE(gpu.err, gpu.out);
  if (gpu.code != 0) {
    one_line_exit_2(gpu, "--oracle gpu: ");
    CHECK(gpu.out.find("FAIL") == std::string::npos);
  }
}

}  // namespace
