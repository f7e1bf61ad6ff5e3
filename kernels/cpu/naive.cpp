// cpu_naive on host tensors: dtype dispatch onto naive.hpp, its heads side by side on the oracles'
// threads (reference/parallel.hpp). Each task writes only its own head's rows and sums in the
// serial order, so the outputs are bitwise the same on any number of threads.
#include "kernels/cpu/naive.hpp"

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/glue.hpp"
#include "reference/parallel.hpp"

namespace fc::cpu {

void naive_forward(const Inputs& in, const Config& cfg, Outputs& out) {
  expect_forward(in, out);
  with_types(in.p.dtype, cfg.accum, [&]<class T, class A>() {
    const int64_t heads = in.p.heads_q;
    ref::parallel_for(int64_t(in.p.batch) * heads,
                      [&](int64_t bh) { naive_forward_head<T, A>(in, out, bh / heads, bh % heads); });
  });
}

void naive_backward(const Inputs& in, const Config& cfg, Outputs& out) {
  expect_backward(in, out);
  with_types(in.p.dtype, cfg.accum, [&]<class T, class A>() {
    // A task per kv head, its sequences in order inside it: paged sequences may share a physical
    // row, whose sum then runs in the serial order.
    const int64_t heads_kv = in.p.heads_kv;
    KvGrads<T, Soft<A>> kv_out(in.p, out.d_k, out.d_v);
    ref::parallel_for(heads_kv, [&](int64_t kv) {
      for (int64_t b = 0; b < in.p.batch; ++b) naive_backward_kv<T, A>(in, out, kv_out, b, kv);
    });
    kv_out.finish();
  });
}

}  // namespace fc::cpu
