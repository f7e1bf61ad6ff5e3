#include "kernels/registry.hpp"
void fc::register_cpu_kernels(std::vector<Kernel>&) {}
