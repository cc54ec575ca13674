// A small binary format for a model's parameters, so that two training runs can be compared
// tensor by tensor whatever precision they trained in. Layout (little-endian, as the machines
// here are):
//   "OVLPWTS1" | uint32 tensor count | per tensor: uint32 rows, uint32 cols, rows*cols float64
//   in column-major order.
#ifndef OVERLAP_EXAMPLES_WEIGHTS_FILE_H_
#define OVERLAP_EXAMPLES_WEIGHTS_FILE_H_

#include <Eigen/Dense>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "examples/mlp.h"

namespace overlap {
namespace examples {

// Writes each layer's weight then bias, widened to double. Unavailable naming the path when it
// cannot be written.
template <typename Scalar>
absl::Status WriteWeights(const std::string& path, const std::vector<DenseLayer<Scalar>>& params);

// Reads every tensor back (a bias comes back as an n x 1 matrix). NotFound or DataLoss naming
// the path when the file is missing, truncated or not in this format.
absl::StatusOr<std::vector<Eigen::MatrixXd>> ReadWeights(const std::string& path);

extern template absl::Status WriteWeights(const std::string&,
                                          const std::vector<DenseLayer<float>>&);
extern template absl::Status WriteWeights(const std::string&,
                                          const std::vector<DenseLayer<double>>&);

}  // namespace examples
}  // namespace overlap

#endif  // OVERLAP_EXAMPLES_WEIGHTS_FILE_H_
