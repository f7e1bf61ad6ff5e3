// Every malformed input file raises FileError with the right fault and a one-line message naming
// the file and the problem; nothing else escapes the reader.
#include "tests/catch.hpp"

#include "io/attention_io.hpp"
#include "io/tests/malformed.hpp"

using namespace fc;

TEST_CASE("read_inputs rejects each malformed file with its typed error", "[cpu]") {
  for (const io::testing::BadCase& c : io::testing::malformed_cases()) {
    CAPTURE(c.label);
    const std::string name = "bad/" + c.label + ".safetensors";
    bool raised = false;
    try {
      io::inputs_from(name, io::parse_safetensors(name, c.bytes));
    } catch (const io::FileError& e) {
      raised = true;
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(io::fault_name(e.fault) == std::string(io::fault_name(c.fault)));
      CHECK(what.rfind(name + ": ", 0) == 0);  // starts with the file name
      CHECK(what.find(c.mention) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
    CHECK(raised);
  }
}

TEST_CASE("read_safetensors refuses missing files and directories without hanging", "[cpu]") {
  for (const std::string& path : {std::string("/nonexistent/x.safetensors"), std::string("/tmp")}) {
    CAPTURE(path);
    try {
      io::read_safetensors(path);
      FAIL("no error");
    } catch (const io::FileError& e) {
      CHECK(e.fault == io::FileFault::Io);
      CHECK(std::string(e.what()).rfind(path + ": ", 0) == 0);
    }
  }
}

TEST_CASE("malformed_cases fixtures are bad only where they claim", "[cpu]") {
  // The generator's good baseline must parse; otherwise every "bad" case above proves nothing.
  const std::string good = io::testing::build_file(io::testing::good_specs(), {{"mask", "none"}});
  CHECK_NOTHROW(io::inputs_from("good", io::parse_safetensors("good", good)));
  CHECK_NOTHROW(io::inputs_from("good", io::parse_safetensors("good", io::testing::good_file(true))));
}
