#include "verdict/execute.hpp"

#include "kernels/hostile.hpp"
#include "verdict/verdict.hpp"

#include <fmt/format.h>

#include <exception>

namespace fc::verdict {

ref::Precision precision_of(const Kernel& k, const Config& cfg, const Problem& p) {
  // Per-tensor dtypes: an undeclared kernel is charged at the coarsest of them (its operands and P may be
  // any one), a declared one by its arithmetic (plugin_arithmetic reads the problem's dtypes).
  return ref::precision_for(
      p, k.info.arithmetic ? k.info.arithmetic(p, cfg) : undeclared_arithmetic(coarsest(dtypes_of(p))));
}

namespace {

// The built-in CPU kernels' outputs are guarded (kernels/hostile.hpp: canaries before, after, in the
// gaps and on padding tokens); a plugin's are guarded by its arena (plugin/abi_map.hpp), and
// the CUDA kernels' and the Python bridge's by their own callers. Gaps for a kernel that declares
// strides (the contract offers strided outputs only to those).
bool guards_outputs(const Kernel& k) { return k.info.device == "cpu" && !k.info.external; }

struct OutputGuards {
  const Problem& p;
  const Inputs& in;
  bool on, gaps;
  std::string stray;  // the first canary a kernel changed, one line per tensor
  std::vector<std::pair<HostTensor*, std::string>> held;

  void place(HostTensor& t, const std::string& name) {
    if (!on || t.shape.empty()) return;
    t = guard_output(t, gaps, padding_elements(in, name));
    held.emplace_back(&t, name);
  }
  // Checks every placed output and hands it back compact (padding tokens 0, as the references).
  void release() {
    for (auto& held_output : held) {
      HostTensor* t = held_output.first;
      const std::string& name = held_output.second;  // a plain reference: clang 14 cannot capture a binding
      const std::vector<bool> untouched = padding_elements(in, name);
      const std::string m =
          check_output_guard(*t, name, untouched, [&](int64_t flat) { return element_name(p, name.c_str(), flat); });
      if (!m.empty()) stray += m + "\n";
      *t = unguard_output(*t, untouched);
    }
    held.clear();
  }
};

}  // namespace

Run execute(const Kernel& k, const Inputs& in, const Config& cfg, bool backward) {
  if (!claims(k, in))
    throw NotApplicable(
        fmt::format("{} declines the problem (batch={} heads_q={} heads_kv={} n_q={} n_k={} d={} {}{}{})", k.info.name,
                    in.p.batch, in.p.heads_q, in.p.heads_kv, in.p.n_q, in.p.n_k, in.p.d, dtypes_str(in.p),
                    in.p.varlen ? " varlen" : "", in.strided() ? " strided" : ""));
  Run r;
  const Problem& p = in.p;
  // The kernel reads hostile memory: NaN in every byte it must not read (kernels/hostile.hpp).
  const bool poisoned = has_poisonable(in);
  const Inputs hostile = poisoned ? poison(in) : Inputs{};
  const Inputs& given = poisoned ? hostile : in;
  OutputGuards guards{p, in, guards_outputs(k), k.info.variants.strides, "", {}};
  try {
    r.out = alloc_outputs(given, false);
    guards.place(r.out.o, "o");
    guards.place(r.out.lse, "lse");
    run_forward_into(k, given, cfg, r.out);
    guards.release();
    if (!guards.stray.empty()) {
      r.error = fmt::format("{} wrote outside its outputs: {}", k.info.name, guards.stray);
      return r;
    }
    if (!backward || !in.has_d_o() || !k.backward) return r;
    if (!k.info.writes_lse) {
      const ref::Certified c = certify(in);
      for (int64_t i = 0; i < r.out.lse.numel(); ++i) r.out.lse.set(i, c.value.lse[size_t(i)]);
    }
    r.out.d_q = HostTensor(dtype_q(p), shape_q(p));
    r.out.d_k = HostTensor(dtype_kv(p), shape_kv(p));
    r.out.d_v = HostTensor(dtype_kv(p), shape_v(p));
    guards.place(r.out.d_q, "d_q");
    guards.place(r.out.d_k, "d_k");
    guards.place(r.out.d_v, "d_v");
    k.backward(given, cfg, r.out);
    guards.release();
    if (!guards.stray.empty()) r.error = fmt::format("{} wrote outside its outputs: {}", k.info.name, guards.stray);
  } catch (const Refusal& e) {
    guards.held.clear();
    r.error = fmt::format("{} failed: {}\n", k.info.name, e.what());
    r.refused = true;
  } catch (const std::exception& e) {
    guards.held.clear();
    r.error = fmt::format("{} failed: {}\n", k.info.name, e.what());
  }
  return r;
}

std::string element_name(const Problem& p, const char* tensor, int64_t flat) {
  const std::string t = tensor;
  if (t == "lse") {
    if (p.varlen) return fmt::format("lse[h={},token={}]", flat / p.total_q, flat % p.total_q);  // (heads_q, total_q)
    const int64_t i = flat % p.n_q, h = flat / p.n_q % p.heads_q, b = flat / p.n_q / p.heads_q;
    return fmt::format("lse[b={},h={},i={}]", b, h, i);
  }
  const bool kv = t == "d_k" || t == "d_v" || t == "k" || t == "v";
  const bool wide_v = t == "o" || t == "v" || t == "d_v" || t == "d_o";
  const int64_t w = wide_v ? head_dim_v(p) : p.d, heads = kv ? p.heads_kv : p.heads_q;
  const int64_t c = flat % w, h = flat / w % heads, rows = flat / w / heads;
  if (kv && p.page_size > 0)  // (num_pages, page_size, heads_kv, width)
    return fmt::format("{}[page={},slot={},h={},c={}]", t, rows / p.page_size, rows % p.page_size, h, c);
  if (p.varlen)  // (total, heads, width): the token on the packed axis
    return fmt::format("{}[token={},h={},c={}]", t, rows, h, c);
  // (batch, heads, n, width)
  const int64_t n = kv ? p.n_k : p.n_q, row = flat / w % n, hd = flat / w / n % heads, b = flat / w / n / heads;
  return fmt::format("{}[b={},h={},{}={},c={}]", t, b, hd, kv ? "j" : "i", row, c);
}

}  // namespace fc::verdict
