// Round trips and reading of well-formed files.
#include "tests/catch.hpp"
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <unistd.h>

#include "io/attention_io.hpp"
#include "io/safetensors.hpp"
#include "io/tests/malformed.hpp"

using namespace fc;

namespace {

// Every bit pattern a 16-bit dtype has, or a spread of awkward values for the wider ones.
HostTensor awkward(DType t) {
  if (dtype_size(t) == 2) {
    HostTensor x(t, {256, 256});  // (256, 256): all 65536 bit patterns, NaNs and infinities included
    for (int i = 0; i < 65536; ++i) std::memcpy(x.bytes.data() + 2 * i, &i, 2);
    return x;
  }
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> vals = {0.0,    -0.0,    1.0, -2.5, 1e-40,        1e-310,
                                    3.4e38, 1.7e308, inf, -inf, std::nan(""), 1.0 / 3};
  HostTensor x(t, {3, 2, 2});  // (3, 2, 2)
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, vals[size_t(i)]);
  return x;
}

}  // namespace

TEST_CASE("safetensors write then read returns the same bytes for every dtype", "[cpu]") {
  for (DType t : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    CAPTURE(dtype_name(t));
    io::TensorFile f;
    f.tensors["x"] = awkward(t);
    f.tensors["scalar"] = HostTensor(t, {});     // () rank 0, one element
    f.tensors["empty"] = HostTensor(t, {0, 3});  // (0, 3) no elements
    f.metadata = {{"mask", "none"}, {"note", "line\nbreak \"quoted\""}};
    const std::string bytes = io::serialize_safetensors(f);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    CHECK(n % 8 == 0);  // data buffer starts 8-byte aligned

    const auto path = std::filesystem::temp_directory_path() /
                      ("fc_io_roundtrip_" + std::to_string(::getpid()) + "_" + dtype_name(t) + ".safetensors");
    io::write_safetensors(path.string(), f);
    const io::TensorFile g = io::read_safetensors(path.string());
    std::filesystem::remove(path);
    REQUIRE(g.tensors.size() == f.tensors.size());
    for (const auto& [name, x] : f.tensors) {
      const HostTensor& y = g.tensors.at(name);
      CHECK(y.dtype == x.dtype);
      CHECK(y.shape == x.shape);
      CHECK(y.bytes == x.bytes);
    }
    CHECK(g.metadata == f.metadata);
  }
}

TEST_CASE("safetensors read decodes a file encoded independently of the writer", "[cpu]") {
  // Header and data built by the test fixture's own encoder: 0x3c3c is fp16 1.0586 (0 01111 0000111100).
  const io::TensorFile f = io::parse_safetensors("fixture", io::testing::good_file(true));
  REQUIRE(f.tensors.size() == 4);
  const HostTensor& q = f.tensors.at("q");
  CHECK(q.dtype == DType::F16);
  CHECK(q.shape == std::vector<int64_t>{1, 2, 3, 4});
  CHECK(q.get(0) == 1.0 + 60.0 / 1024);
  CHECK(f.metadata.at("mask") == "causal_bottom_right");
}

TEST_CASE("inputs_from derives the attention problem from the file", "[cpu]") {
  const Inputs in = io::inputs_from("fixture", io::parse_safetensors("fixture", io::testing::good_file(true)));
  CHECK(in.p.batch == 1);
  CHECK(in.p.heads_q == 2);
  CHECK(in.p.heads_kv == 1);
  CHECK(in.p.n_q == 3);
  CHECK(in.p.n_k == 5);
  CHECK(in.p.d == 4);
  CHECK(in.p.dtype == DType::F16);
  CHECK(in.p.mask == Mask::CausalBottomRight);
  CHECK(in.p.scale == 0.25);
  CHECK(in.has_d_o());

  // No metadata: mask none, scale 1/sqrt(d); no d_o: forward only.
  const Inputs bare = io::inputs_from(
      "bare", io::parse_safetensors("bare", io::testing::build_file(io::testing::good_specs("BF16"), nullptr)));
  CHECK(bare.p.mask == Mask::None);
  CHECK(bare.p.scale == 1.0 / std::sqrt(4.0));
  CHECK(bare.p.dtype == DType::BF16);
  CHECK_FALSE(bare.has_d_o());
}

TEST_CASE("inputs_file then inputs_from round-trips problem, scale and tensors", "[cpu]") {
  Inputs in;
  in.p = Problem{2, 4, 2, 3, 7, 8, DType::F32, Mask::CausalTopLeft, 0.1};  // 0.1: needs all 17 digits
  in.q = HostTensor(DType::F32, shape_q(in.p));                            // (batch, heads_q, n_q, d)
  in.k = HostTensor(DType::F32, shape_kv(in.p));                           // (batch, heads_kv, n_k, d)
  in.v = HostTensor(DType::F32, shape_kv(in.p));                           // (batch, heads_kv, n_k, d)
  for (int64_t i = 0; i < in.k.numel(); ++i) in.k.set(i, double(i) / 7);
  const Inputs out =
      io::inputs_from("mem", io::parse_safetensors("mem", io::serialize_safetensors(io::inputs_file(in))));
  CHECK(out.p.scale == in.p.scale);
  CHECK(out.p.mask == in.p.mask);
  CHECK(out.p.heads_kv == 2);
  CHECK(out.k.bytes == in.k.bytes);
}

namespace {

// The message a file's loading is refused with ("" when it loads).
std::string refusal(const io::TensorFile& f) {
  try {
    io::inputs_from("mem", io::parse_safetensors("mem", io::serialize_safetensors(f)));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a case with per-tensor dtypes round-trips them; a single-dtype file is written as before", "[cpu]") {
  for (const DtypeSet t :
       {DtypeSet{DType::F32, DType::F16, DType::F32}, DtypeSet{DType::BF16, DType::F16, DType::F32}}) {
    Inputs in;
    in.p = Problem{1, 2, 1, 3, 5, 4, DType::F32, Mask::None, 0.5};
    set_dtypes(in.p, t);
    in.q = HostTensor(t.q, shape_q(in.p));
    in.k = HostTensor(t.kv, shape_kv(in.p));
    in.v = HostTensor(t.kv, shape_v(in.p));
    in.d_o = HostTensor(t.o, shape_o(in.p));
    for (int64_t i = 0; i < in.k.numel(); ++i) in.k.set(i, double(i) / 7), in.q.set(i % in.q.numel(), 1.0 / 3);
    const io::TensorFile f = io::inputs_file(in);
    CHECK(f.metadata.count("dtype_o") == (t.o != t.q ? 1u : 0u));
    const Inputs out = io::inputs_from("mem", io::parse_safetensors("mem", io::serialize_safetensors(f)));
    CHECK(dtypes_of(out.p) == t);
    CHECK(mixed_dtypes(out.p));
    CHECK(out.q.bytes == in.q.bytes);
    CHECK(out.k.bytes == in.k.bytes);
    CHECK(out.d_o.dtype == t.o);
  }
  // One dtype: the metadata and bytes of a file written before per-tensor dtypes existed.
  Inputs in;
  in.p = Problem{1, 1, 1, 2, 2, 2, DType::F16, Mask::None, 0.5};
  in.q = HostTensor(DType::F16, shape_q(in.p)), in.k = HostTensor(DType::F16, shape_kv(in.p));
  in.v = HostTensor(DType::F16, shape_v(in.p));
  const io::TensorFile f = io::inputs_file(in);
  CHECK(f.metadata == std::map<std::string, std::string>{{"mask", "none"}, {"scale", "0.5"}});
  const Inputs out = io::inputs_from("mem", io::parse_safetensors("mem", io::serialize_safetensors(f)));
  CHECK(!mixed_dtypes(out.p));
  CHECK(int32_t(out.p.dtype_kv) == int32_t(kDtypeAsQ));
  // k and v of two dtypes, d_o not o's dtype, and an unknown dtype_o are refused.
  Inputs bad = in;
  bad.v = HostTensor(DType::F32, shape_v(in.p));
  CHECK(refusal(io::inputs_file(bad)).find("k and v share one dtype") != std::string::npos);
  bad = in;
  bad.d_o = HostTensor(DType::F32, shape_o(in.p));
  CHECK(refusal(io::inputs_file(bad)).find("d_o has o's dtype") != std::string::npos);
  io::TensorFile odd = io::inputs_file(in);
  odd.metadata["dtype_o"] = "F8";
  CHECK(refusal(odd).find("dtype_o") != std::string::npos);
}
