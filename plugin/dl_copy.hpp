// Copying one DLTensor into another after checking that they describe the same tensor (shape, dtype,
// device type): how the Python bridge moves a callable's outputs (a torch or JAX array, any strides,
// host or CUDA memory) into the suite's. flashcheck_copy of the C API.
#pragma once

#include <dlpack/dlpack.h>

#include <string>

namespace fc::plugin {

std::string dl_describe(const DLTensor& t);  // "float16 (2, 4, 8, 64) on cuda"
// "" on success, or one line: why src cannot be (or was not) copied into dst.
std::string dl_copy(const DLTensor& src, const DLTensor& dst);

}  // namespace fc::plugin
