#include "properties/case.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <filesystem>
#include <functional>
#include <ostream>
#include <tuple>

#include "io/attention_io.hpp"
#include "io/numbers.hpp"
#include "io/safetensors.hpp"

namespace fc::props {
namespace {

const char* const kRegimeNames[] = {"normal", "outliers",  "huge",        "far_below", "fp16_max",
                                    "ties",   "all_equal", "subnormal_p", "poison",    "fully_masked",
                                    "grid",   "subnormal", "ones",        "long_row"};
static_assert(sizeof(kRegimeNames) / sizeof(kRegimeNames[0]) == size_t(Regime::kCount));

std::string values(const char* name, const HostTensor& t) {
  constexpr int64_t kShown = 48;  // beyond this the replay line, not the printout, carries the case
  std::string s = fmt::format("  {} =", name);
  for (int64_t i = 0; i < std::min(t.numel(), kShown); ++i) s += fmt::format(" {:.9g}", t.get(i));
  if (t.numel() > kShown) s += fmt::format(" ... ({} values)", t.numel());
  return s + "\n";
}

std::string config_str(const Config& c) {
  return fmt::format("block_m={} block_n={} order={}{}", c.block_m, c.block_n, c.order == LoopOrder::FA1 ? "FA1" : "FA2",
                     c.splits > 0 ? fmt::format(" splits={}", c.splits) : "");
}

using FieldMap = std::map<std::string, std::string>;

[[noreturn]] void bad(const std::string& path, const char* key, const std::string& value, const std::string& why) {
  throw io::FileError(io::FileFault::BadMetadata, path,
                      fmt::format("metadata \"{}\" = {} {}", key, io::quoted(value), why));
}

// An integer field in [lo, hi], `dflt` when absent; plain decimal only (io/numbers.hpp).
int64_t read_int(const std::string& path, const FieldMap& m, const char* key, int64_t dflt, int64_t lo, int64_t hi) {
  auto it = m.find(key);
  if (it == m.end()) return dflt;
  int64_t x = 0;
  if (!io::parse_decimal_i64(it->second, &x)) bad(path, key, it->second, "is not a decimal integer");
  if (x < lo || x > hi) bad(path, key, it->second, fmt::format("is outside [{}, {}]", lo, hi));
  return x;
}

Config read_config(const std::string& path, const FieldMap& m, const std::string& suffix) {
  Config c;
  const int64_t kMax = std::numeric_limits<int32_t>::max();
  c.block_m = int32_t(read_int(path, m, ("fc.block_m" + suffix).c_str(), 0, 0, kMax));
  c.block_n = int32_t(read_int(path, m, ("fc.block_n" + suffix).c_str(), 0, 0, kMax));
  c.order = read_int(path, m, ("fc.order" + suffix).c_str(), 0, 0, 1) == 1 ? LoopOrder::FA1 : LoopOrder::FA2;
  c.splits = int32_t(read_int(path, m, ("fc.splits" + suffix).c_str(), 0, 0, kMax));
  return c;
}

// The poisoned value: "nan", "inf", "-inf" (as write_case spells them) or a plain decimal.
double read_poison_value(const std::string& path, const FieldMap& m) {
  auto it = m.find("fc.poison_value");
  if (it == m.end()) return 0;
  const std::string& v = it->second;
  if (v == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (v == "inf") return std::numeric_limits<double>::infinity();
  if (v == "-inf") return -std::numeric_limits<double>::infinity();
  double x = 0;
  if (!io::parse_decimal(v, &x)) bad(path, "fc.poison_value", v, "is not nan, inf, -inf or a decimal number");
  return x;
}

}  // namespace

const char* regime_name(Regime r) { return int32_t(r) >= 0 && r < Regime::kCount ? kRegimeNames[int32_t(r)] : "?"; }

bool parse_regime(const std::string& s, Regime* out) {
  for (int32_t r = 0; r < int32_t(Regime::kCount); ++r)
    if (s == kRegimeNames[r]) return *out = Regime(r), true;
  return false;
}

namespace {

bool same_tensor(const HostTensor& a, const HostTensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.bytes == b.bytes && a.strides == b.strides &&
         a.offset == b.offset;
}

// "dtype=F16", or with per-tensor dtypes "dtypes q=F32 kv=F16 o=F32".
std::string dtype_field(const Problem& p) {
  return mixed_dtypes(p) ? "dtypes " + dtypes_str(p) : std::string("dtype=") + dtype_name(p.dtype);
}

auto problem_fields(const Problem& p) {
  return std::tie(p.batch, p.heads_q, p.heads_kv, p.n_q, p.n_k, p.d, p.dtype, p.dtype_kv, p.dtype_o, p.mask, p.scale,
                  p.d_v, p.window_left, p.window_right, p.softcap, p.alibi, p.varlen, p.total_q, p.total_k, p.page_size,
                  p.num_pages, p.pages_per_seq, p.sinks, p.padded, p.mask_kind, p.mask_dtype, p.block_q, p.block_k, p.mask_b,
                  p.mask_h, p.block_b, p.block_h);
}

auto config_fields(const Config& c) { return std::tie(c.block_m, c.block_n, c.order, c.accum, c.deterministic, c.splits); }

}  // namespace

bool same_case(const Case& a, const Case& b) {
  const Inputs &x = a.in, &y = b.in;
  // The poisoned value is NaN or an infinity: compared by its bits.
  return problem_fields(x.p) == problem_fields(y.p) && config_fields(a.cfg) == config_fields(b.cfg) &&
         config_fields(a.cfg2) == config_fields(b.cfg2) && a.regime == b.regime && a.aux == b.aux &&
         a.poison_tensor == b.poison_tensor && a.poison_index == b.poison_index &&
         std::memcmp(&a.poison_value, &b.poison_value, sizeof(double)) == 0 && same_tensor(x.q, y.q) &&
         same_tensor(x.k, y.k) && same_tensor(x.v, y.v) && same_tensor(x.d_o, y.d_o) &&
         same_tensor(x.cu_seqlens_q, y.cu_seqlens_q) && same_tensor(x.cu_seqlens_k, y.cu_seqlens_k) &&
         same_tensor(x.page_table, y.page_table) && same_tensor(x.alibi_slopes, y.alibi_slopes) &&
         same_tensor(x.sinks, y.sinks) && same_tensor(x.cu_seqlens_q_padded, y.cu_seqlens_q_padded) &&
         same_tensor(x.cu_seqlens_k_padded, y.cu_seqlens_k_padded) &&
         same_tensor(x.mask, y.mask) && same_tensor(x.block_mask, y.block_mask);
}

std::string describe(const Case& c) {
  const Problem& p = c.in.p;
  std::string s =
      fmt::format("  problem: batch={} heads_q={} heads_kv={} n_q={} n_k={} d={} {} mask={} scale={:.17g}\n", p.batch,
                  p.heads_q, p.heads_kv, p.n_q, p.n_k, p.d, dtype_field(p), mask_name(p.mask), p.scale);
  s += fmt::format("  config: {} (second config: {})\n", config_str(c.cfg), config_str(c.cfg2));
  s += fmt::format("  regime: {}", regime_name(c.regime));
  if (c.regime == Regime::Poison)
    s += fmt::format(" ({} at {}[{}])", c.poison_value, "qkv"[c.poison_tensor], c.poison_index);
  s += fmt::format(", aux={}\n", c.aux);
  s += values("q", c.in.q) + values("k", c.in.k) + values("v", c.in.v);
  if (c.in.has_d_o()) s += values("d_o", c.in.d_o);
  return s;
}

std::string describe(const Inputs& in) {
  const Problem& p = in.p;
  std::string s =
      fmt::format("  problem: batch={} heads_q={} heads_kv={} n_q={} n_k={} d={} {} mask={} scale={:.17g}\n", p.batch,
                  p.heads_q, p.heads_kv, p.n_q, p.n_k, p.d, dtype_field(p), mask_name(p.mask), p.scale);
  std::string more;
  if (p.d_v > 0) more += fmt::format(" d_v={}", p.d_v);
  if (has_window(p)) more += fmt::format(" window=({}, {})", p.window_left, p.window_right);
  if (p.softcap > 0) more += fmt::format(" softcap={:.17g}", p.softcap);
  if (p.varlen) more += fmt::format(" varlen total_q={} total_k={}", p.total_q, p.total_k);
  if (p.padded) more += " padded";
  if (is_paged(p))
    more += fmt::format(" paged page_size={} num_pages={} pages_per_seq={}", p.page_size, p.num_pages, p.pages_per_seq);
  if (has_mask_tensor(p))
    more += fmt::format(" mask_tensor={} [{}, {}, {}, {}]",
                        p.mask_kind == MaskKind::Bool ? "bool" : dtype_name(p.mask_dtype), p.mask_b, p.mask_h, p.n_q,
                        p.n_k);
  if (has_block_mask(p)) more += fmt::format(" block_mask={}x{} [{}, {}]", p.block_q, p.block_k, p.block_b, p.block_h);
  auto strided = [](const HostTensor& t) { return !t.shape.empty() && !t.is_compact(); };
  for (auto [name, t] :
       {std::pair{"q", &in.q}, std::pair{"k", &in.k}, std::pair{"v", &in.v}, std::pair{"d_o", &in.d_o}})
    if (strided(*t)) more += fmt::format(" {} strided", name);
  if (!more.empty()) s += "  variants:" + more + "\n";
  for (auto [name, t] : {std::pair{"cu_seqlens_q", &in.cu_seqlens_q}, std::pair{"cu_seqlens_k", &in.cu_seqlens_k},
                         std::pair{"page_table", &in.page_table}, std::pair{"alibi_slopes", &in.alibi_slopes},
                         std::pair{"sinks", &in.sinks}, std::pair{"cu_seqlens_q_padded", &in.cu_seqlens_q_padded},
                         std::pair{"cu_seqlens_k_padded", &in.cu_seqlens_k_padded},
                         std::pair{"sinks", &in.sinks}, std::pair{"mask", &in.mask},
                         std::pair{"block_mask", &in.block_mask}})
    if (!t->shape.empty()) s += values(name, *t);
  s += values("q", in.q) + values("k", in.k) + values("v", in.v);
  if (in.has_d_o()) s += values("d_o", in.d_o);
  return s;
}

void showValue(const Case& c, std::ostream& os) { os << "\n" << describe(c); }

std::string write_case(const std::string& dir, const std::string& law, const std::string& kernel, const Case& c,
                       const std::map<std::string, std::string>& extra, const std::string& name) {
  io::TensorFile f = io::inputs_file(c.in);
  auto& m = f.metadata;
  m.insert(extra.begin(), extra.end());
  m["fc.law"] = law;
  m["fc.kernel"] = kernel;  // the kernel it failed on (informative: any claiming kernel replays it)
  m["fc.regime"] = regime_name(c.regime);
  for (auto [cfg, suffix] : {std::pair{&c.cfg, ""}, std::pair{&c.cfg2, "2"}}) {
    m[fmt::format("fc.block_m{}", suffix)] = std::to_string(cfg->block_m);
    m[fmt::format("fc.block_n{}", suffix)] = std::to_string(cfg->block_n);
    m[fmt::format("fc.order{}", suffix)] = std::to_string(int(cfg->order));
    if (cfg->splits > 0) m[fmt::format("fc.splits{}", suffix)] = std::to_string(cfg->splits);
  }
  m["fc.poison_tensor"] = std::to_string(c.poison_tensor);
  m["fc.poison_index"] = std::to_string(c.poison_index);
  m["fc.poison_value"] = fmt::format("{}", c.poison_value);  // "nan", "inf", "-inf" or a number
  m["fc.aux"] = std::to_string(c.aux);
  const std::string bytes = io::serialize_safetensors(f);
  std::filesystem::create_directories(dir);
  const std::string path = name.empty()
                               ? fmt::format("{}/{}-{:016x}.safetensors", dir, law, std::hash<std::string>{}(bytes))
                               : fmt::format("{}/{}", dir, name);
  io::write_safetensors(path, f);
  return path;
}

// Every field is validated here, where the file is read: the laws index tensors with poison_index
// and trust the configs, so a hand-edited or corrupted regression file must be refused (exit 2), never
// reach them (an out-of-range index wrote out of bounds).
Case read_case(const std::string& path, std::string* law, std::map<std::string, std::string>* metadata) {
  io::TensorFile f = io::read_safetensors(path);
  if (metadata) *metadata = f.metadata;
  return case_from(path, std::move(f), law);
}

Case case_from(const std::string& path, io::TensorFile f, std::string* law) {
  const FieldMap m = f.metadata;
  Case c;
  c.in = io::inputs_from(path, std::move(f));
  if (law) *law = m.count("fc.law") ? m.at("fc.law") : "";
  if (auto it = m.find("fc.regime"); it != m.end() && !parse_regime(it->second, &c.regime))
    bad(path, "fc.regime", it->second, "is not a regime");
  c.cfg = read_config(path, m, "");
  c.cfg2 = read_config(path, m, "2");
  c.poison_tensor = int32_t(read_int(path, m, "fc.poison_tensor", 0, 0, 2));
  const int64_t n = c.poison_tensor == 0 ? numel_q(c.in.p) : numel_kv(c.in.p);
  c.poison_index = read_int(path, m, "fc.poison_index", 0, 0, n - 1);
  c.poison_value = read_poison_value(path, m);
  if (auto it = m.find("fc.aux"); it != m.end() && !io::parse_decimal_u64(it->second, &c.aux))
    bad(path, "fc.aux", it->second, "is not a decimal integer >= 0");
  return c;
}

}  // namespace fc::props
