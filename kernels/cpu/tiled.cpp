// cpu_tiled on host tensors: dtype dispatch onto tiled.hpp.
#include "kernels/cpu/tiled.hpp"

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/glue.hpp"

namespace fc::cpu {

void tiled_forward(const Inputs& in, const Tiling& t, DType accum, Outputs& out) {
  expect_forward(in, out);
  with_types(in.p.dtype, accum, [&]<class T, class A>() { tiled_forward<T, A>(in, t, out); });
}

void tiled_backward(const Inputs& in, const Tiling& t, DType accum, Outputs& out) {
  expect_backward(in, out);
  with_types(in.p.dtype, accum, [&]<class T, class A>() { tiled_backward<T, A>(in, t, out); });
}

void tiled_forward(const Inputs& in, const Config& cfg, Outputs& out) {
  tiled_forward(in, tiling_of(cfg), cfg.accum, out);
}

void tiled_forward_split_drop_tail(const Inputs& in, const Config& cfg, Outputs& out) {
  expect_forward(in, out);
  with_types(in.p.dtype, cfg.accum, [&]<class T, class A>() { tiled_forward<T, A, true>(in, tiling_of(cfg), out); });
}

void tiled_backward(const Inputs& in, const Config& cfg, Outputs& out) {
  tiled_backward(in, tiling_of(cfg), cfg.accum, out);
}

}  // namespace fc::cpu
