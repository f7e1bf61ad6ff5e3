// The flashcheck binary on bad input and bad usage: exit 2, exactly one line on stderr naming the
// file and the problem, promptly, and no output file left behind.
#include "tests/catch.hpp"
#include <filesystem>

#include "cli/tests/subprocess.hpp"
#include "io/attention_io.hpp"
#include "io/tests/malformed.hpp"

using namespace fc::cli::testing;

TEST_CASE("flashcheck reference exits 2 with one line on each malformed input file", "[cpu]") {
  const std::string dir = scratch_dir("malformed");
  for (const fc::io::testing::BadCase& c : fc::io::testing::malformed_cases()) {
    CAPTURE(c.label);
    const std::string in = dir + "/" + c.label + ".safetensors";
    const std::string out = dir + "/" + c.label + ".out.safetensors";
    write_bytes(in, c.bytes);
    const RunResult r = run_flashcheck({"reference", "--inputs", in, "--out", out}, 20);
    CAPTURE(r.err);
    CHECK(r.code == 2);
    CHECK(r.stderr_lines() == 1);
    CHECK(r.err.find(in) != std::string::npos);         // names the file
    CHECK(r.err.find(c.mention) != std::string::npos);  // names the problem
    CHECK_FALSE(std::filesystem::exists(out));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("flashcheck reference exits 2 on a missing file and on a directory", "[cpu]") {
  const std::string dir = scratch_dir("missing");
  for (const std::string& in : {dir + "/absent.safetensors", dir}) {
    CAPTURE(in);
    const RunResult r = run_flashcheck({"reference", "--inputs", in, "--out", dir + "/o.safetensors"}, 20);
    CHECK(r.code == 2);
    CHECK(r.stderr_lines() == 1);
    CHECK(r.err.find(in + ":") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("flashcheck reference keeps its error on one line when the file name holds a newline", "[cpu]") {
  const std::string dir = scratch_dir("newline");
  const std::string in = dir + "/two\nlines.safetensors";
  write_bytes(in, "short");
  const RunResult r = run_flashcheck({"reference", "--inputs", in, "--out", dir + "/o.safetensors"}, 20);
  CHECK(r.code == 2);
  CHECK(r.stderr_lines() == 1);
  CHECK(r.err.find("two?lines.safetensors: truncated") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("flashcheck reference exits 2 on F64 values beyond the certified oracle's range", "[cpu]") {
  const std::string dir = scratch_dir("range");
  fc::Inputs in;
  in.p = fc::Problem{1, 1, 1, 2, 2, 2, fc::DType::F64, fc::Mask::None, 1.0};
  in.q = fc::HostTensor(fc::DType::F64, fc::shape_q(in.p));   // (1, 1, 2, 2)
  in.k = fc::HostTensor(fc::DType::F64, fc::shape_kv(in.p));  // (1, 1, 2, 2)
  in.v = fc::HostTensor(fc::DType::F64, fc::shape_kv(in.p));  // (1, 1, 2, 2)
  in.k.set(3, 0x1p500);
  fc::io::write_safetensors(dir + "/big.safetensors", fc::io::inputs_file(in));
  const RunResult r =
      run_flashcheck({"reference", "--inputs", dir + "/big.safetensors", "--out", dir + "/o.safetensors"}, 20);
  CHECK(r.code == 2);
  CHECK(r.stderr_lines() == 1);
  CHECK(r.err.find("\"k\" element 3") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("flashcheck usage errors exit 2 with one line", "[cpu]") {
  const std::vector<std::vector<std::string>> bad = {
      {},                                          // no subcommand
      {"frobnicate"},                              // unknown subcommand
      {"kernels", "--bogus"},                      // unknown option
      {"reference"},                               // missing required options
      {"reference", "--inputs", "x.safetensors"},  // missing --out
      {"audit", "--out"},                          // option without its value
  };
  for (const auto& args : bad) {
    CAPTURE(args);
    const RunResult r = run_flashcheck(args, 20);
    CHECK(r.code == 2);
    CHECK(r.stderr_lines() == 1);
  }
  const RunResult help = run_flashcheck({"--help"}, 20);
  CHECK(help.code == 0);
  CHECK(help.out.find("reference") != std::string::npos);
}
