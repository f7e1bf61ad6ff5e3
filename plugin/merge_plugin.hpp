// A merge-state plugin (fc_kernel.merge, ABI version 5) as a registry Kernel of kind Merge: each call's
// tensors handed over as host DLTensors (the inputs with their strides), in this process.
#pragma once

#include <flashcheck/plugin.h>

#include <string>

#include "kernels/registry.hpp"

namespace fc::plugin {

// The registry row: name, description, the dtypes its probe accepts (LoadError when it accepts none).
Kernel merge_kernel(const fc_kernel* k, const std::string& description);

}  // namespace fc::plugin
