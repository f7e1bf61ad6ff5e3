// See naive_fp64.hpp.
#include "naive_fp64.hpp"

namespace fc::ref::bench {

NaiveOut naive_fp64(const Mat& q, const Mat& k, const Mat& v, const Mat& d_o, double scale) {
  NaiveOut r;
  Mat p = scale * (q * k.transpose());               // (n_q, n_k): S, then P in place
  const Eigen::VectorXd m = p.rowwise().maxCoeff();  // (n_q): shift for overflow safety
  p = (p.colwise() - m).array().exp().matrix();
  const Eigen::VectorXd l = p.rowwise().sum();  // (n_q)
  p = l.cwiseInverse().asDiagonal() * p;
  r.lse = m + l.array().log().matrix();
  r.o.noalias() = p * v;
  const Eigen::VectorXd big_d = d_o.cwiseProduct(r.o).rowwise().sum();  // (n_q): D_i = d_o_i·o_i
  Mat ds = d_o * v.transpose();                                         // (n_q, n_k): dP, then dS in place
  ds = p.cwiseProduct(ds.colwise() - big_d);
  r.d_v.noalias() = p.transpose() * d_o;
  r.d_q.noalias() = scale * (ds * k);
  r.d_k.noalias() = scale * (ds.transpose() * q);
  return r;
}

}  // namespace fc::ref::bench
