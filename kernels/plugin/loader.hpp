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

// What the suite needs to know about a kernel besides its entry points.
struct Meta {
  std::string name;
  int32_t device_type = kDLCPU;  // kDLCPU or kDLCUDA
  bool writes_lse = true;
  bool backward = false;
};

// Throws LoadError unless k is a usable ABI-2 kernel; `where` names it in the message.
Meta validate(const fc_kernel* k, const std::string& where);

// dlopen(path) and flashcheck_kernel(); the library stays loaded for the life of the process.
const fc_kernel* load_plugin(const std::string& path);

}  // namespace fc::plugin
