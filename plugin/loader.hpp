// Loading a plugin (<flashcheck/plugin.h>) with dlopen, and validating what it exports: the symbol,
// the ABI version, the name, the device, the entries that may not be NULL. Every refusal is one line
// naming the file (LoadError: the CLI's exit 2).
#pragma once

#include <flashcheck/plugin.h>

#include <stdexcept>
#include <string>

namespace fc::plugin {

struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A version-3 kernel's declarations (fc_declarations) as plain data, so that they cross the worker's
// pipe: the head dims and configs copied out of the plugin's arrays, their counts bounded.
inline constexpr int32_t kMaxDeclaredDims = 256, kMaxDeclaredConfigs = 32, kMaxDeclaredDtypes = 64;
struct Declared {
  int32_t present = 0;  // 0: a version-2 kernel, or declarations == NULL
  fc_lengths n_q{}, n_k{};
  int32_t max_batch = 0, max_heads = 0;
  int32_t num_head_dims = 0;
  int32_t head_dims[kMaxDeclaredDims]{};
  double scale = 0;
  fc_arithmetic arithmetic{};
  fc_exactness exact{};
  int32_t backward_reduction = 0;
  int32_t num_configs = 0;
  fc_config configs[kMaxDeclaredConfigs]{};
  int32_t large_offsets = 0;
  int32_t num_dtypes = 0;  // 0: probed (version 4: declared combinations)
  fc_dtypes dtypes[kMaxDeclaredDtypes]{};
  int32_t sinks = 0;  // version 4: attention sinks declared
  int32_t padded_varlen = 0;  // version 5: padded varlen declared
  int32_t mask_tensors = 0, mask_dtypes = 0, block_masks = 0;  // version 5
};

// What the suite needs to know about a kernel besides its entry points.
struct Meta {
  std::string name;
  int32_t device_type = kDLCPU;  // kDLCPU or kDLCUDA
  bool writes_lse = true;
  bool backward = false;
  int32_t abi_version = FC_ABI_VERSION;
  Declared declared;
  bool merge = false;  // version 5: a merge-state kernel (fc_kernel.merge)
};

// The declarations of k (abi_version 3), checked: LoadError for a field out of range (a residue
// outside [0, multiple_of), min > max, a head dim outside 1..256, more than kMaxDeclaredConfigs
// configs or dtype combinations, a non-positive or non-finite scale, an unknown enum value, a dtype
// combination with an unknown type or given twice).
Declared read_declarations(const fc_kernel* k, const std::string& where);

// Throws LoadError unless k is a usable kernel of ABI version 2 or 3; `where` names it in the message.
Meta validate(const fc_kernel* k, const std::string& where);

// dlopen(path) and flashcheck_kernel(); the library stays loaded for the life of the process.
const fc_kernel* load_plugin(const std::string& path);

}  // namespace fc::plugin
