#include "kernels/plugin/loader.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <filesystem>

namespace fc::plugin {

Meta validate(const fc_kernel* k, const std::string& where) {
  if (!k) throw LoadError(fmt::format("{}: flashcheck_kernel() returned NULL", where));
  if (k->abi_version != FC_ABI_VERSION)
    throw LoadError(fmt::format("{} implements plugin ABI version {}; this flashcheck reads version {}", where,
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
  if (!k->supports) throw LoadError(fmt::format("{}: the supports entry is NULL", where));
  if (!k->forward) throw LoadError(fmt::format("{}: the forward entry is NULL", where));
  return Meta{k->name, k->device_type, k->writes_lse != 0, k->backward != nullptr};
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
