// The references' dense matrices: row-major Eigen matrices of float64 (Mat) and float (MatF), and
// Eigen's index type, one definition for the certified oracle, the error model and their benchmarks.
#pragma once

#include <Eigen/Core>

namespace fc::ref {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Index = Eigen::Index;

}  // namespace fc::ref
