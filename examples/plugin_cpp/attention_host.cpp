// A C++ host kernel as a flashcheck plugin (<flashcheck/plugin.h>): FlashAttention's forward algorithm
// on the CPU in single precision: key tiles of 16, a running max and sum per row (the online softmax),
// o rescaled as the max grows, finalized by 1/l; lse = m + log(l). F32 tensors in any strides, the
// three masks, GQA and d_v != d; forward only (backward NULL). It declines what it does not implement
// (other dtypes, varlen, paged K/V, windows, softcap, ALiBi).
//
//   cmake -S . -B build -Dflashcheck_DIR=... && cmake --build build
//   flashcheck check --plugin build/libattention_host.so          # or: ctest --test-dir build
//
// FC_FAULT_RESCALE (a compile definition) plants FlashAttention's classic bug: o is not rescaled when
// the running max grows, so every row whose max moves after its first tile is wrong.
#include <flashcheck/plugin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <vector>

namespace {

constexpr int64_t kTile = 16;
std::string error_text;

const char* last_error() { return error_text.c_str(); }

// Element idx of a rank-4 F32 tensor, honouring its strides (NULL: compact row-major).
float& at(const DLTensor& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  const int64_t idx[4] = {i0, i1, i2, i3};
  int64_t off = 0, stride = 1;
  for (int a = 3; a >= 0; --a) {
    off += idx[a] * (t.strides ? t.strides[a] : stride);
    stride *= t.shape[a];
  }
  return static_cast<float*>(t.data)[t.byte_offset / sizeof(float) + off];
}
float& at(const DLTensor& t, int64_t i0, int64_t i1, int64_t i2) {
  const int64_t s2 = t.strides ? t.strides[2] : 1, s1 = t.strides ? t.strides[1] : t.shape[2],
                s0 = t.strides ? t.strides[0] : t.shape[1] * t.shape[2];
  return static_cast<float*>(t.data)[t.byte_offset / sizeof(float) + i0 * s0 + i1 * s1 + i2 * s2];
}

bool visible(const fc_problem& p, int64_t i, int64_t j) {
  if (p.mask == FC_CAUSAL_TOP_LEFT) return j <= i;
  if (p.mask == FC_CAUSAL_BOTTOM_RIGHT) return j <= i + p.n_k - p.n_q;
  return true;
}

int supports(const fc_problem* p, const fc_forward_args* a) {
  const DLDataType t = a->q.dtype;
  return t.code == kDLFloat && t.bits == 32 && t.lanes == 1 && a->q.ndim == 4 && a->q.device.device_type == kDLCPU &&
         p->mask >= 0 && p->mask <= 2 && p->softcap == 0 && p->window_left == -1 && p->window_right == -1 &&
         a->cu_seqlens_q.ndim == 0 && a->cu_seqlens_k.ndim == 0 && a->page_table.ndim == 0 &&
         a->alibi_slopes.ndim == 0;
}

void forward_head(const fc_problem& p, const fc_forward_args& a, int64_t b, int64_t h) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const int64_t hk = h / (p.heads_q / p.heads_kv);
  const auto scale = static_cast<float>(p.scale);
  std::vector<float> o(p.d_v), s(kTile);
  for (int64_t i = 0; i < p.n_q; ++i) {
    float m = -kInf, l = 0;
    bool nan_score = false;  // skipped while no finite max exists, so it poisons the row at the end
    std::fill(o.begin(), o.end(), 0.0f);
    for (int64_t j0 = 0; j0 < p.n_k; j0 += kTile) {
      const int64_t j1 = std::min<int64_t>(j0 + kTile, p.n_k);
      float tile_max = -kInf;
      for (int64_t j = j0; j < j1; ++j) {
        s[j - j0] = -kInf;
        if (!visible(p, i, j)) continue;
        float dot = 0;
        for (int64_t x = 0; x < p.d; ++x) dot += at(a.q, b, h, i, x) * at(a.k, b, hk, j, x);
        s[j - j0] = scale * dot;
        nan_score = nan_score || std::isnan(s[j - j0]);
        tile_max = std::max(tile_max, s[j - j0]);  // a NaN score never becomes the max: it poisons via its weight
      }
      const float m_new = std::max(m, tile_max);
      if (m_new == -kInf) continue;  // nothing visible yet: -inf - -inf must not become NaN
#ifdef FC_FAULT_RESCALE
      const float alpha = 1.0f;  // the planted bug: the old o and l are not rescaled to the new max
#else
      const float alpha = std::exp(m - m_new);  // exp(-inf) = 0 on the first visible tile
#endif
      l *= alpha;
      for (float& ox : o) ox *= alpha;
      for (int64_t j = j0; j < j1; ++j) {
        if (!visible(p, i, j)) continue;
        const float w = std::exp(s[j - j0] - m_new);
        l += w;
        for (int64_t x = 0; x < p.d_v; ++x) o[x] += w * at(a.v, b, hk, j, x);
      }
      m = m_new;
    }
    // A row with no visible key (or only NaN scores): o = 0, lse = -inf; a NaN score poisons its row.
    const bool seen = m != -kInf;
    if (seen && nan_score) l = std::numeric_limits<float>::quiet_NaN();
    for (int64_t x = 0; x < p.d_v; ++x) at(a.o, b, h, i, x) = seen ? o[x] / l : 0.0f;
    if (a.lse.ndim == 3) at(a.lse, b, h, i) = seen ? m + std::log(l) : -kInf;
  }
}

int forward(const fc_problem* p, const fc_forward_args* a, void* /*stream*/) {
  try {
    for (int64_t b = 0; b < p->batch; ++b)
      for (int64_t h = 0; h < p->heads_q; ++h) forward_head(*p, *a, b, h);
    return 0;
  } catch (const std::exception& e) {  // nothing may cross the C ABI
    error_text = e.what();
    return 1;
  }
}

const fc_kernel kernel = {FC_ABI_VERSION, "example_host_cpp", kDLCPU, 1, supports, forward, nullptr, last_error};

}  // namespace

extern "C" const fc_kernel* flashcheck_kernel() { return &kernel; }
