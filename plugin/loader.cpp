#include "plugin/loader.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "plugin/abi_map.hpp"

namespace fc::plugin {

Meta validate(const fc_kernel* k, const std::string& where) {
  if (!k) throw LoadError(fmt::format("{}: flashcheck_kernel() returned NULL", where));
  if (k->abi_version < 2 || k->abi_version > FC_ABI_VERSION)
    throw LoadError(fmt::format("{} implements plugin ABI version {}; this flashcheck reads versions 2 to {}", where,
                                k->abi_version, FC_ABI_VERSION));
  if (!k->name || !*k->name) throw LoadError(fmt::format("{}: the kernel has no name", where));
  const size_t len = strnlen(k->name, 65);
  if (len > 64) throw LoadError(fmt::format("{}: the kernel's name is longer than 64 characters", where));
  for (size_t i = 0; i < len; ++i) {
    const char c = k->name[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      throw LoadError(fmt::format("{}: the kernel's name may use only letters, digits, '_', '-' and '.'", where));
  }
  if (k->device_type != kDLCPU && k->device_type != kDLCUDA)
    throw LoadError(fmt::format("{}: device_type {} is neither kDLCPU (1) nor kDLCUDA (2)", where, k->device_type));
  const bool merge = k->abi_version >= 5 && k->merge != nullptr;  // fc_kernel ends at declarations before 5
  if (merge) {
    if (k->device_type != kDLCPU)
      throw LoadError(fmt::format("{}: a merge kernel must be a host kernel (device_type kDLCPU)", where));
    Meta m{k->name, k->device_type, true, false, k->abi_version, {}};
    m.merge = true;
    return m;
  }
  if (!k->supports) throw LoadError(fmt::format("{}: the supports entry is NULL", where));
  if (!k->forward) throw LoadError(fmt::format("{}: the forward entry is NULL", where));
  Meta m{k->name, k->device_type, k->writes_lse != 0, k->backward != nullptr, k->abi_version, {}};
  m.declared = read_declarations(k, where);
  return m;
}

namespace {

void check_lengths(const fc_lengths& l, const char* axis, const std::string& where) {
  const bool bad = l.multiple_of < 0 || l.min < 0 || l.max < 0 ||
                   (l.multiple_of > 1 ? (l.residue < 0 || l.residue >= l.multiple_of) : l.residue != 0) ||
                   (l.max > 0 && l.min > l.max);
  if (bad)
    throw LoadError(
        fmt::format("{}: declarations.{} = {{multiple_of {}, residue {}, min {}, max {}}} is not a set of "
                    "lengths (residue in [0, multiple_of), 0 <= min <= max)",
                    where, axis, l.multiple_of, l.residue, l.min, l.max));
  // Some length in [max(min, 1), max] must be of the residue class.
  if (l.max > 0) {
    const int64_t m = l.multiple_of > 1 ? l.multiple_of : 1, lo = std::max(l.min, 1);
    const int64_t first = lo + ((l.residue - lo) % m + m) % m;
    if (first > l.max)
      throw LoadError(fmt::format("{}: declarations.{} admits no length (none in [{}, {}] is {} mod {})", where, axis,
                                  lo, l.max, l.residue, m));
  }
}

bool dtype_code_ok(int32_t c) { return c == FC_DTYPE_UNKNOWN || abi_dtype_code(c); }

}  // namespace

Declared read_declarations(const fc_kernel* k, const std::string& where) {
  Declared d;
  if (k->abi_version < 3 || !k->declarations) return d;
  const fc_declarations& x = *k->declarations;
  d.present = 1;
  check_lengths(x.n_q, "n_q", where), check_lengths(x.n_k, "n_k", where);
  d.n_q = x.n_q, d.n_k = x.n_k;
  if (x.max_batch < 0 || x.max_heads < 0)
    throw LoadError(fmt::format("{}: declarations.max_batch and max_heads must be >= 0 (0: no bound)", where));
  d.max_batch = x.max_batch, d.max_heads = x.max_heads;
  if (x.num_head_dims < 0 || x.num_head_dims > kMaxDeclaredDims || (x.num_head_dims > 0 && !x.head_dims))
    throw LoadError(fmt::format("{}: declarations.num_head_dims = {} (0..{}, with head_dims non-NULL)", where,
                                x.num_head_dims, kMaxDeclaredDims));
  for (int32_t i = 0; i < x.num_head_dims; ++i) {
    if (x.head_dims[i] < 1 || x.head_dims[i] > 256)
      throw LoadError(fmt::format("{}: declarations.head_dims[{}] = {} is outside 1..256", where, i, x.head_dims[i]));
    d.head_dims[i] = x.head_dims[i];
  }
  d.num_head_dims = x.num_head_dims;
  if (x.scale != 0 && !(std::isfinite(x.scale) && x.scale > 0))
    throw LoadError(
        fmt::format("{}: declarations.scale = {} (0: any scale; else a positive finite one)", where, x.scale));
  d.scale = x.scale;
  const fc_arithmetic& a = x.arithmetic;
  if (a.summation < FC_SUM_UNKNOWN || a.summation > FC_SUM_TENSOR_CORE || !dtype_code_ok(a.accumulator) ||
      !dtype_code_ok(a.p_type) || a.block_m < 0 || a.block_n < 0 || !(a.exp_ulps >= 0) || !(a.log_ulps >= 0) ||
      !std::isfinite(a.exp_ulps) || !std::isfinite(a.log_ulps))
    throw LoadError(
        fmt::format("{}: declarations.arithmetic has a field out of range (summation 0..2, dtype codes "
                    "0..4, tiles and ulps >= 0)",
                    where));
  d.arithmetic = a;
  d.exact = x.exact;
  if (x.backward_reduction < FC_BACKWARD_UNKNOWN || x.backward_reduction > FC_BACKWARD_ATOMIC)
    throw LoadError(fmt::format("{}: declarations.backward_reduction = {} (0..2)", where, x.backward_reduction));
  d.backward_reduction = x.backward_reduction;
  if (x.num_configs < 0 || x.num_configs > kMaxDeclaredConfigs || (x.num_configs > 0 && !x.configs))
    throw LoadError(fmt::format("{}: declarations.num_configs = {} (0..{}, with configs non-NULL)", where,
                                x.num_configs, kMaxDeclaredConfigs));
  for (int32_t i = 0; i < x.num_configs; ++i) {
    const fc_config& c = x.configs[i];
    if (c.block_m < 0 || c.block_n < 0 || c.splits < 0)
      throw LoadError(fmt::format("{}: declarations.configs[{}] has a negative field", where, i));
    d.configs[i] = c;
  }
  d.num_configs = x.num_configs;
  d.large_offsets = x.large_offsets != 0;
  if (k->abi_version < 4) return d;  // a version-3 kernel's declarations end at large_offsets
  if (x.num_dtypes < 0 || x.num_dtypes > kMaxDeclaredDtypes || (x.num_dtypes > 0 && !x.dtypes))
    throw LoadError(fmt::format("{}: declarations.num_dtypes = {} (0..{}, with dtypes non-NULL)", where, x.num_dtypes,
                                kMaxDeclaredDtypes));
  for (int32_t i = 0; i < x.num_dtypes; ++i) {
    const fc_dtypes& t = x.dtypes[i];
    for (int32_t c : {t.q, t.kv, t.o})
      if (!abi_dtype_code(c))
        throw LoadError(
            fmt::format("{}: declarations.dtypes[{}] = {{{}, {}, {}}}: each of q, kv, o is a dtype code ({})",
                        where, i, t.q, t.kv, t.o, abi_dtype_names(abi_float)));
    for (int32_t j = 0; j < i; ++j)
      if (d.dtypes[j].q == t.q && d.dtypes[j].kv == t.kv && d.dtypes[j].o == t.o)
        throw LoadError(fmt::format("{}: declarations.dtypes[{}] repeats dtypes[{}]", where, i, j));
    d.dtypes[i] = t;
  }
  d.num_dtypes = x.num_dtypes;
  d.sinks = x.sinks != 0;
  if (k->abi_version < 5) return d;  // a version-4 kernel's declarations end at sinks
  if (x.mask_tensors < 0 || x.mask_tensors > 3)
    throw LoadError(fmt::format("{}: declarations.mask_tensors = {} (bit 1 boolean, bit 2 additive)", where,
                                x.mask_tensors));
  if ((x.mask_dtypes & ~abi_mask_dtype_bits()) != 0 || ((x.mask_tensors & 2) != 0) != (x.mask_dtypes != 0))
    throw LoadError(
        fmt::format("{}: declarations.mask_dtypes = {:#x}: bits 1 << {}, nonzero exactly when additive "
                    "mask tensors are declared",
                    where, x.mask_dtypes, abi_dtype_names(kernel_float)));
  if (x.block_masks != 0 && x.block_masks != 1)
    throw LoadError(fmt::format("{}: declarations.block_masks = {} (0 or 1)", where, x.block_masks));
  d.mask_tensors = x.mask_tensors, d.mask_dtypes = x.mask_dtypes, d.block_masks = x.block_masks;
  d.padded_varlen = x.padded_varlen != 0;
  return d;
}

const fc_kernel* load_plugin(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw LoadError(fmt::format("{}: no such file", path));
  if (!std::filesystem::is_regular_file(path, ec)) throw LoadError(fmt::format("{}: not a regular file", path));
  // A path without '/' would make dlopen search the library path, not the file named.
  const std::string at = path.find('/') == std::string::npos ? "./" + path : path;
  void* handle = dlopen(at.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    throw LoadError(fmt::format("{} is not a loadable shared library ({})", path, why ? why : "dlopen failed"));
  }
  using Entry = const fc_kernel* (*)();
  dlerror();
  void* sym = dlsym(handle, "flashcheck_kernel");
  if (!sym) throw LoadError(fmt::format("{} is not a flashcheck plugin: it exports no flashcheck_kernel", path));
  const fc_kernel* k = reinterpret_cast<Entry>(sym)();
  validate(k, path);
  return k;
}

}  // namespace fc::plugin
