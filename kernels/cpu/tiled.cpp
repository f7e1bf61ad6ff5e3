// cpu_tiled on host tensors: dtype dispatch onto tiled.hpp.
#include "kernels/cpu/tiled.hpp"

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/glue.hpp"

namespace fc::cpu {

void tiled_forward(const Problem& p, const Tiling& t, DType accum, const HostTensor& q, const HostTensor& k,
                   const HostTensor& v, HostTensor& o, HostTensor& lse) {
  expect_forward(p, q, k, v, o, lse);
  std::vector<double> lse_d(size_t(numel_lse(p)));  // (batch, heads_q, n_q)
  with_types(p.dtype, accum, [&]<class T, class A>() {
    tiled_forward<T, A>(p, t, q.data<T>(), k.data<T>(), v.data<T>(), o.data<T>(), lse_d.data());
  });
  store_lse(lse, lse_d);
}

void tiled_backward(const Problem& p, const Tiling& t, DType accum, const HostTensor& q, const HostTensor& k,
                    const HostTensor& v, const HostTensor& o, const HostTensor& lse, const HostTensor& d_o,
                    HostTensor& d_q, HostTensor& d_k, HostTensor& d_v) {
  expect_backward(p, q, k, v, o, lse, d_o, d_q, d_k, d_v);
  const std::vector<double> lse_d = lse_values(lse);  // (batch, heads_q, n_q)
  with_types(p.dtype, accum, [&]<class T, class A>() {
    tiled_backward<T, A>(p, t, q.data<T>(), k.data<T>(), v.data<T>(), o.data<T>(), lse_d.data(), d_o.data<T>(),
                         d_q.data<T>(), d_k.data<T>(), d_v.data<T>());
  });
}

void tiled_forward(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                   HostTensor& o, HostTensor& lse) {
  tiled_forward(p, tiling_of(cfg), cfg.accum, q, k, v, o, lse);
}

void tiled_backward(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                    const HostTensor& o, const HostTensor& lse, const HostTensor& d_o, HostTensor& d_q, HostTensor& d_k,
                    HostTensor& d_v) {
  tiled_backward(p, tiling_of(cfg), cfg.accum, q, k, v, o, lse, d_o, d_q, d_k, d_v);
}

}  // namespace fc::cpu
