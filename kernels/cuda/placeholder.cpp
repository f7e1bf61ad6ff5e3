#include "kernels/registry.hpp"
void fc::register_cuda_kernels(std::vector<Kernel>&) {}
