// cpu_naive on host tensors: dtype dispatch onto naive.hpp.
#include "kernels/cpu/naive.hpp"

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/glue.hpp"

namespace fc::cpu {

void naive_forward(const Inputs& in, const Config& cfg, Outputs& out) {
  expect_forward(in, out);
  with_types(in.p.dtype, cfg.accum, [&]<class T, class A>() { naive_forward<T, A>(in, out); });
}

void naive_backward(const Inputs& in, const Config& cfg, Outputs& out) {
  expect_backward(in, out);
  with_types(in.p.dtype, cfg.accum, [&]<class T, class A>() { naive_backward<T, A>(in, out); });
}

}  // namespace fc::cpu
