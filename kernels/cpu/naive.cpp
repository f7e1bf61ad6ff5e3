// cpu_naive on host tensors: dtype dispatch onto naive.hpp.
#include "kernels/cpu/naive.hpp"

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/glue.hpp"

namespace fc::cpu {

void naive_forward(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                   HostTensor& o, HostTensor& lse) {
  expect_forward(p, q, k, v, o, lse);
  std::vector<double> lse_d(size_t(numel_lse(p)));  // (batch, heads_q, n_q)
  with_types(p.dtype, cfg.accum, [&]<class T, class A>() {
    naive_forward<T, A>(p, q.data<T>(), k.data<T>(), v.data<T>(), o.data<T>(), lse_d.data());
  });
  store_lse(lse, lse_d);
}

void naive_backward(const Problem& p, const Config& cfg, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                    const HostTensor& o, const HostTensor& lse, const HostTensor& d_o, HostTensor& d_q, HostTensor& d_k,
                    HostTensor& d_v) {
  expect_backward(p, q, k, v, o, lse, d_o, d_q, d_k, d_v);
  const std::vector<double> lse_d = lse_values(lse);  // (batch, heads_q, n_q)
  with_types(p.dtype, cfg.accum, [&]<class T, class A>() {
    naive_backward<T, A>(p, q.data<T>(), k.data<T>(), v.data<T>(), o.data<T>(), lse_d.data(), d_o.data<T>(),
                         d_q.data<T>(), d_k.data<T>(), d_v.data<T>());
  });
}

}  // namespace fc::cpu
