#include "tensor.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace fc {

HostTensor::HostTensor(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
  bytes.assign(size_t(numel()) * size_t(dtype_size(t)), 0);
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

double HostTensor::get(int64_t i) const {
  switch (dtype) {
    case DType::F16: return double(static_cast<float>(data<Eigen::half>()[i]));
    case DType::BF16: return double(static_cast<float>(data<Eigen::bfloat16>()[i]));
    case DType::F32: return double(data<float>()[i]);
    case DType::F64: return data<double>()[i];
  }
  throw std::logic_error("bad dtype");
}

void HostTensor::set(int64_t i, double x) {
  switch (dtype) {
    // Round once, from double: going through float first would double-round.
    case DType::F16: data<Eigen::half>()[i] = Eigen::half(round_to(DType::F16, x)); return;
    case DType::BF16: data<Eigen::bfloat16>()[i] = Eigen::bfloat16(round_to(DType::BF16, x)); return;
    case DType::F32: data<float>()[i] = float(x); return;
    case DType::F64: data<double>()[i] = x; return;
  }
  throw std::logic_error("bad dtype");
}

std::vector<double> HostTensor::to_f64() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[size_t(i)] = get(i);
  return out;
}

HostTensor HostTensor::from_f64(DType t, std::vector<int64_t> s, const std::vector<double>& x) {
  HostTensor out(t, std::move(s));
  if (int64_t(x.size()) != out.numel()) throw std::invalid_argument("from_f64: size mismatch");
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, x[size_t(i)]);
  return out;
}

namespace {
// Round a double to p significant bits with exponent range [e_min, e_max] (IEEE binary with
// subnormals), ties to even. Used for fp16 (p=11) and bf16 (p=8) so that a double rounds once.
double round_binary(double x, int p, int e_min, int e_max) {
  if (!(x == x) || x == 0.0 || std::isinf(x)) return x;
  int e;
  std::frexp(x, &e);                         // x = f * 2^e, 0.5 <= |f| < 1, so the leading bit has weight 2^(e-1)
  int lsb = std::max(e - p, e_min - p + 1);  // weight exponent of the last kept bit
  double q = std::ldexp(std::nearbyint(std::ldexp(x, -lsb)), lsb);  // nearbyint: ties to even
  double max_finite = std::ldexp(2.0 - std::ldexp(1.0, 1 - p), e_max);
  if (std::fabs(q) > max_finite) return std::copysign(HUGE_VAL, x);
  return q;
}
}  // namespace

double round_to(DType t, double x) {
  switch (t) {
    case DType::F16: return round_binary(x, 11, -14, 15);
    case DType::BF16: return round_binary(x, 8, -126, 127);
    case DType::F32: return double(float(x));
    case DType::F64: return x;
  }
  throw std::logic_error("bad dtype");
}

std::vector<int64_t> shape_q(const Problem& p) { return {p.batch, p.heads_q, p.n_q, p.d}; }
std::vector<int64_t> shape_kv(const Problem& p) { return {p.batch, p.heads_kv, p.n_k, p.d}; }
std::vector<int64_t> shape_lse(const Problem& p) { return {p.batch, p.heads_q, p.n_q}; }

}  // namespace fc
