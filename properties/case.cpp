#include "properties/case.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <ostream>

#include "io/attention_io.hpp"
#include "io/errors.hpp"
#include "io/safetensors.hpp"

namespace fc::props {
namespace {

const char* const kRegimeNames[] = {"normal", "outliers",  "huge",        "far_below", "fp16_max",
                                    "ties",   "all_equal", "subnormal_p", "poison",    "fully_masked",
                                    "grid",   "subnormal", "ones"};
static_assert(sizeof(kRegimeNames) / sizeof(kRegimeNames[0]) == size_t(Regime::kCount));

std::string values(const char* name, const HostTensor& t) {
  constexpr int64_t kShown = 48;  // beyond this the replay line, not the printout, carries the case
  std::string s = fmt::format("  {} =", name);
  for (int64_t i = 0; i < std::min(t.numel(), kShown); ++i) s += fmt::format(" {:.9g}", t.get(i));
  if (t.numel() > kShown) s += fmt::format(" ... ({} values)", t.numel());
  return s + "\n";
}

std::string config_str(const Config& c) {
  return fmt::format("block_m={} block_n={} order={}", c.block_m, c.block_n, c.order == LoopOrder::FA1 ? "FA1" : "FA2");
}

// A metadata value as a number: the whole string must parse (strtod reads nan and inf), or the file
// is refused with a FileError naming the key.
double parse_double(const std::string& path, const std::map<std::string, std::string>& m, const char* key,
                    double dflt) {
  auto it = m.find(key);
  if (it == m.end()) return dflt;
  const char* s = it->second.c_str();
  char* end = nullptr;
  const double x = std::strtod(s, &end);
  if (it->second.empty() || end == s || *end != '\0')
    throw io::FileError(io::Fault::BadHeader, path,
                        fmt::format("metadata {} = {} is not a number", io::quoted(key), io::quoted(it->second)));
  return x;
}

int64_t parse_int(const std::string& path, const std::map<std::string, std::string>& m, const char* key, int64_t lo,
                  int64_t hi) {
  const double x = parse_double(path, m, key, double(lo));
  if (!(x >= double(lo) && x <= double(hi)) || x != std::floor(x))
    throw io::FileError(io::Fault::BadHeader, path,
                        fmt::format("metadata {} must be an integer in [{}, {}]", io::quoted(key), lo, hi));
  return int64_t(x);
}

Config read_config(const std::string& path, const std::map<std::string, std::string>& m, const std::string& suffix) {
  Config c;
  c.block_m = int32_t(parse_int(path, m, ("fc.block_m" + suffix).c_str(), 0, 1 << 20));
  c.block_n = int32_t(parse_int(path, m, ("fc.block_n" + suffix).c_str(), 0, 1 << 20));
  c.order = parse_int(path, m, ("fc.order" + suffix).c_str(), 0, 1) == 1 ? LoopOrder::FA1 : LoopOrder::FA2;
  return c;
}

}  // namespace

const char* regime_name(Regime r) { return int32_t(r) >= 0 && r < Regime::kCount ? kRegimeNames[int32_t(r)] : "?"; }

bool parse_regime(const std::string& s, Regime* out) {
  for (int32_t r = 0; r < int32_t(Regime::kCount); ++r)
    if (s == kRegimeNames[r]) return *out = Regime(r), true;
  return false;
}

std::string describe(const Case& c) {
  const Problem& p = c.in.p;
  std::string s =
      fmt::format("  problem: batch={} heads_q={} heads_kv={} n_q={} n_k={} d={} dtype={} mask={} scale={:.17g}\n",
                  p.batch, p.heads_q, p.heads_kv, p.n_q, p.n_k, p.d, dtype_name(p.dtype), mask_name(p.mask), p.scale);
  s += fmt::format("  config: {} (second config: {})\n", config_str(c.cfg), config_str(c.cfg2));
  s += fmt::format("  regime: {}", regime_name(c.regime));
  if (c.regime == Regime::Poison)
    s += fmt::format(" ({} at {}[{}])", c.poison_value, "qkv"[c.poison_tensor], c.poison_index);
  s += fmt::format(", aux={}\n", c.aux);
  s += values("q", c.in.q) + values("k", c.in.k) + values("v", c.in.v);
  if (c.in.has_d_o()) s += values("d_o", c.in.d_o);
  return s;
}

void showValue(const Case& c, std::ostream& os) { os << "\n" << describe(c); }

std::string write_case(const std::string& dir, const std::string& law, const std::string& kernel, const Case& c) {
  io::TensorFile f = io::inputs_file(c.in);
  auto& m = f.metadata;
  m["fc.law"] = law;
  m["fc.kernel"] = kernel;  // the kernel it failed on (informative: any claiming kernel replays it)
  m["fc.regime"] = regime_name(c.regime);
  for (auto [cfg, suffix] : {std::pair{&c.cfg, ""}, std::pair{&c.cfg2, "2"}}) {
    m[fmt::format("fc.block_m{}", suffix)] = std::to_string(cfg->block_m);
    m[fmt::format("fc.block_n{}", suffix)] = std::to_string(cfg->block_n);
    m[fmt::format("fc.order{}", suffix)] = std::to_string(int(cfg->order));
  }
  m["fc.poison_tensor"] = std::to_string(c.poison_tensor);
  m["fc.poison_index"] = std::to_string(c.poison_index);
  m["fc.poison_value"] = fmt::format("{}", c.poison_value);  // "nan", "inf", "-inf" or a number
  m["fc.aux"] = std::to_string(c.aux);
  const std::string bytes = io::serialize_safetensors(f);
  std::filesystem::create_directories(dir);
  const std::string path = fmt::format("{}/{}-{:016x}.safetensors", dir, law, std::hash<std::string>{}(bytes));
  io::write_safetensors(path, f);
  return path;
}

Case read_case(const std::string& path, std::string* law, std::map<std::string, std::string>* metadata) {
  io::TensorFile f = io::read_safetensors(path);
  const auto m = f.metadata;
  Case c;
  c.in = io::inputs_from(path, std::move(f));
  if (law) *law = m.count("fc.law") ? m.at("fc.law") : "";
  if (metadata) *metadata = m;
  if (m.count("fc.regime") && !parse_regime(m.at("fc.regime"), &c.regime))
    throw io::FileError(io::Fault::BadHeader, path,
                        fmt::format("metadata \"fc.regime\" = {} is not a regime", io::quoted(m.at("fc.regime"))));
  c.cfg = read_config(path, m, "");
  c.cfg2 = read_config(path, m, "2");
  c.poison_tensor = int32_t(parse_int(path, m, "fc.poison_tensor", 0, 2));
  const int64_t n = c.poison_tensor == 0 ? numel_q(c.in.p) : numel_kv(c.in.p);
  c.poison_index = parse_int(path, m, "fc.poison_index", 0, std::max<int64_t>(0, n - 1));
  c.poison_value = parse_double(path, m, "fc.poison_value", 0);
  if (m.count("fc.aux")) {
    const std::string& s = m.at("fc.aux");
    char* end = nullptr;
    errno = 0;
    c.aux = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])) || *end != '\0' || errno == ERANGE)
      throw io::FileError(io::Fault::BadHeader, path,
                          fmt::format("metadata \"fc.aux\" = {} is not an unsigned integer", io::quoted(s)));
  }
  return c;
}

}  // namespace fc::props
