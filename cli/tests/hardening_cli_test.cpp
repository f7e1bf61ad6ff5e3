// The flashcheck binary against hostile input beyond malformed files: regression cases with fields out
// of range, command-line numbers that are not plain decimals, output paths that are the input, a
// FIFO or a folder, problems too large for the oracle, a report that cannot be written, and the
// contract's non-finite rows in the reference. Each: exit 2 with one line on stderr (or the right
// answer), promptly, with the input untouched.
#include "tests/catch.hpp"
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/tests/subprocess.hpp"
#include "io/attention_io.hpp"

using namespace fc;
using namespace fc::cli::testing;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Inputs small_inputs(DType t, Mask mask, int32_t n_q, int32_t n_k, bool with_d_o) {
  Inputs in;
  in.p = Problem{1, 2, 1, n_q, n_k, 4, t, mask, 0.5};
  in.q = HostTensor(t, shape_q(in.p));   // (1, 2, n_q, 4)
  in.k = HostTensor(t, shape_kv(in.p));  // (1, 1, n_k, 4)
  in.v = HostTensor(t, shape_kv(in.p));  // (1, 1, n_k, 4)
  for (int64_t i = 0; i < in.q.numel(); ++i) in.q.set(i, double(i % 7) / 4 - 0.75);
  for (int64_t i = 0; i < in.k.numel(); ++i) in.k.set(i, double(i % 5) / 4 - 0.5), in.v.set(i, double(i % 3) - 1);
  if (with_d_o) {
    in.d_o = HostTensor(t, shape_q(in.p));  // (1, 2, n_q, 4)
    for (int64_t i = 0; i < in.d_o.numel(); ++i) in.d_o.set(i, double(i % 4) / 2 - 0.5);
  }
  return in;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void expect_one_line_exit_2(const RunResult& r, const std::string& mention) {
  CAPTURE(r.err, r.out);
  CHECK(r.code == 2);
  CHECK(r.stderr_lines() == 1);
  CHECK(r.err.find(mention) != std::string::npos);
}

// A regression case file for law `law` on the small problem, with metadata overrides.
std::string case_file(const std::string& dir, const std::string& name, const std::map<std::string, std::string>& meta) {
  io::TensorFile f = io::inputs_file(small_inputs(DType::F16, Mask::None, 3, 5, false));
  f.metadata["fc.law"] = "nan_blast";
  f.metadata["fc.regime"] = "poison";
  f.metadata["fc.poison_tensor"] = "0";
  f.metadata["fc.poison_index"] = "0";
  f.metadata["fc.poison_value"] = "nan";
  for (const auto& [k, v] : meta) f.metadata[k] = v;
  const std::string path = dir + "/" + name;
  io::write_safetensors(path, f);
  return path;
}

}  // namespace

TEST_CASE("check refuses a regression case whose fields are out of range, never indexing with them", "[cpu]") {
  const std::string dir = scratch_dir("badcase");
  const std::vector<std::map<std::string, std::string>> bad = {
      {{"fc.poison_index", "24"}},  // q has 24 elements: one past the end
      {{"fc.poison_index", "1000000000"}},
      {{"fc.poison_index", "-1"}},
      {{"fc.poison_index", "1e3"}},
      {{"fc.poison_tensor", "3"}},
      {{"fc.poison_tensor", "-1"}},
      {{"fc.poison_value", "+-1"}},
      {{"fc.block_m", "-4"}},
      {{"fc.order", "2"}},
      {{"fc.regime", "sideways"}},
      {{"fc.aux", "0x10"}},
      {{"fc.poison_index", "00"}},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const auto& [key, value] = *bad[i].begin();
    CAPTURE(key, value);
    const std::string file = case_file(dir, "nan_blast-" + std::to_string(i) + ".safetensors", bad[i]);
    expect_one_line_exit_2(run_flashcheck({"check", "--kernel", "cpu_tiled", "--law", "nan_blast", "--case", file}),
                           key);
  }
  // The same files in a regressions folder, which every `check` replays first.
  expect_one_line_exit_2(
      run_flashcheck({"check", "--kernel", "cpu_tiled", "--law", "nan_blast", "--regressions", dir, "--cases", "1"}),
      "fc.");
  // The last element is in range: the case runs.
  const std::string good = scratch_dir("goodcase");
  const std::string file = case_file(good, "nan_blast-ok.safetensors", {{"fc.poison_index", "23"}});
  CHECK(run_flashcheck({"check", "--kernel", "cpu_tiled", "--law", "nan_blast", "--case", file}).code == 0);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(good);
}

TEST_CASE("check takes only plain decimal numbers and an existing regressions folder", "[cpu]") {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{{"--seed", "-1"},
                                                                                    {"--seed", "010"},
                                                                                    {"--seed", "0x10"},
                                                                                    {"--seed", "1e3"},
                                                                                    {"--seed", "18446744073709551616"},
                                                                                    {"--cases", "010"},
                                                                                    {"--cases", "-5"},
                                                                                    {"--cases", "+5"},
                                                                                    {"--cases", "0"},
                                                                                    {"--cases", " 5"}}) {
    std::vector<std::string> cmd = {"check", "--kernel", "cpu_tiled", "--law", "lse_bracket"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    CAPTURE(args);
    expect_one_line_exit_2(run_flashcheck(cmd), args[0]);
  }
  expect_one_line_exit_2(
      run_flashcheck({"check", "--kernel", "cpu_tiled", "--regressions", "/nonexistent/regressions", "--cases", "1"}),
      "no such folder");
  const RunResult ok = run_flashcheck(
      {"check", "--kernel", "cpu_tiled", "--law", "lse_bracket", "--cases", "10", "--seed", "18446744073709551615"});
  CHECK(ok.code == 0);
  CHECK(ok.out.find("seed 18446744073709551615") != std::string::npos);
}

TEST_CASE("check exits non-zero when its report cannot be written to stdout", "[cpu]") {
  const RunResult r =
      run_flashcheck({"check", "--kernel", "cpu_tiled", "--law", "lse_bracket", "--cases", "5"}, 60, "/dev/full");
  CAPTURE(r.err);
  CHECK(r.code == 2);
  CHECK(r.stderr_lines() == 1);
  CHECK(r.err.find("standard output") != std::string::npos);
}

TEST_CASE("reference refuses an output that is its input, a FIFO or a folder, before any work", "[cpu]") {
  const std::string dir = scratch_dir("outpaths");
  const std::string in = dir + "/in.safetensors";
  io::write_safetensors(in, io::inputs_file(small_inputs(DType::F16, Mask::None, 3, 5, true)));
  const std::string before = slurp(in);
  REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);
  REQUIRE(::link(in.c_str(), (dir + "/link").c_str()) == 0);
  for (const std::string& out : {in, dir + "/./in.safetensors", dir + "/link", dir + "/fifo", dir, dir + "/no/x"}) {
    CAPTURE(out);
    expect_one_line_exit_2(run_flashcheck({"reference", "--inputs", in, "--out", out}, 20), out);
  }
  CHECK(slurp(in) == before);
  // A good run replaces the previous output as a whole and leaves no temporary beside it.
  const std::string out = dir + "/out.safetensors";
  std::ofstream(out) << "previous";
  REQUIRE(run_flashcheck({"reference", "--inputs", in, "--out", out}).code == 0);
  CHECK(io::read_safetensors(out).tensors.count("d_q") == 1);
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) entries += e.path().filename().string()[0] == '.';
  CHECK(entries == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("reference refuses a problem too large for the oracle in one line, naming shape and need", "[cpu]") {
  const std::string dir = scratch_dir("toolarge");
  for (int32_t n : {1 << 20, 1 << 16, 1 << 15}) {
    CAPTURE(n);
    Inputs in;
    in.p = Problem{1, 1, 1, n, n, 1, DType::F16, Mask::None, 1.0};
    in.q = HostTensor(DType::F16, shape_q(in.p));   // (1, 1, n, 1): a 2 MiB tensor at n = 2^20
    in.k = HostTensor(DType::F16, shape_kv(in.p));  // (1, 1, n, 1)
    in.v = HostTensor(DType::F16, shape_kv(in.p));  // (1, 1, n, 1)
    const std::string file = dir + "/n" + std::to_string(n) + ".safetensors";
    io::write_safetensors(file, io::inputs_file(in));
    if (n == 1 << 15) continue;  // within the default limits of a large machine: used below
    // The CPU oracle's estimate (the GPU's takes n = 2^16 in seconds).
    const RunResult r =
        run_flashcheck({"reference", "--inputs", file, "--out", dir + "/o.safetensors", "--oracle", "cpu"}, 30);
    expect_one_line_exit_2(r, "n_q=" + std::to_string(n));
    CHECK(r.err.find("--max-") != std::string::npos);  // names the limit to raise
    CHECK_FALSE(std::filesystem::exists(dir + "/o.safetensors"));
  }
  // Limits raised past what the machine (here: the test's 4 GiB address-space cap) can give: one
  // line saying so, not "std::bad_alloc".
  const RunResult r = run_flashcheck({"reference", "--inputs", dir + "/n32768.safetensors", "--out",
                                      dir + "/o.safetensors", "--max-memory", "1T", "--max-seconds", "100000000",
                                      "--oracle", "cpu"},
                                     60);
  expect_one_line_exit_2(r, "out of memory");
  for (const char* limit : {"-1", "0", "1.5G", "12X", "010G"})
    expect_one_line_exit_2(run_flashcheck({"reference", "--inputs", dir + "/n65536.safetensors", "--out",
                                           dir + "/o.safetensors", "--max-memory", limit}),
                           "--max-memory");
  std::filesystem::remove_all(dir);
}

TEST_CASE("reference keeps non-finite d_o out of the forward and rows that see no key at o = 0, lse = -inf", "[cpu]") {
  const std::string dir = scratch_dir("nonfinite");
  // bottom-right causal with n_q = 5 > n_k = 3: rows 0 and 1 of each head see no key.
  const Inputs clean = small_inputs(DType::F32, Mask::CausalBottomRight, 5, 3, true);
  Inputs poisoned = clean;
  poisoned.d_o.set(4 * 4 + 1, kNaN);      // head 0, row 4 (sees every key): its d_o
  poisoned.q.set(0, kNaN);                // head 0, row 0 (sees no key): its q
  poisoned.d_o.set(5 * 4 + 4 + 2, kNaN);  // head 1, row 1 (sees no key): its d_o
  io::write_safetensors(dir + "/clean.safetensors", io::inputs_file(clean));
  io::write_safetensors(dir + "/poisoned.safetensors", io::inputs_file(poisoned));
  for (const char* name : {"clean", "poisoned"})
    REQUIRE(run_flashcheck({"reference", "--inputs", dir + "/" + name + ".safetensors", "--out",
                            dir + "/" + name + ".out.safetensors"})
                .code == 0);
  const io::TensorFile a = io::read_safetensors(dir + "/clean.out.safetensors");
  const io::TensorFile b = io::read_safetensors(dir + "/poisoned.out.safetensors");
  // The forward never reads d_o, and row 0's q is never multiplied by a key: o and lse are the clean
  // run's, bit for bit (rows that see no key: o = 0, lse = -inf).
  CHECK(a.tensors.at("o").bytes == b.tensors.at("o").bytes);
  CHECK(a.tensors.at("lse").bytes == b.tensors.at("lse").bytes);
  CHECK(b.tensors.at("lse").get(0) == -std::numeric_limits<double>::infinity());
  const HostTensor& d_q = b.tensors.at("d_q");  // (1, 2, 5, 4)
  for (int64_t i = 0; i < d_q.numel(); ++i) {
    CAPTURE(i);
    const int64_t row = i / 4;  // head * 5 + row
    if (row == 4)
      CHECK(std::isnan(d_q.get(i)));  // the row with the NaN d_o: uncertified
    else if (row == 0 || row == 1 || row == 5 || row == 6)
      CHECK(d_q.get(i) == 0.0);  // rows that see no key: d_q = 0, never NaN
    else
      CHECK(d_q.get(i) == a.tensors.at("d_q").get(i));
  }
  std::filesystem::remove_all(dir);
}
