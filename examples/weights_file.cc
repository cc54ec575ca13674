#include "examples/weights_file.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace overlap {
namespace examples {
namespace {

constexpr char kMagic[8] = {'O', 'V', 'L', 'P', 'W', 'T', 'S', '1'};

void WriteMatrix(std::ofstream& out, const Eigen::MatrixXd& m) {
  const uint32_t rows = static_cast<uint32_t>(m.rows());
  const uint32_t cols = static_cast<uint32_t>(m.cols());
  out.write(reinterpret_cast<const char*>(&rows), sizeof(rows));
  out.write(reinterpret_cast<const char*>(&cols), sizeof(cols));
  out.write(reinterpret_cast<const char*>(m.data()),
            static_cast<std::streamsize>(sizeof(double) * m.size()));
}

}  // namespace

template <typename Scalar>
absl::Status WriteWeights(const std::string& path, const std::vector<DenseLayer<Scalar>>& params) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open for writing: ", std::strerror(errno)));
  }
  out.write(kMagic, sizeof(kMagic));
  const uint32_t count = static_cast<uint32_t>(2 * params.size());
  out.write(reinterpret_cast<const char*>(&count), sizeof(count));
  for (const DenseLayer<Scalar>& layer : params) {
    WriteMatrix(out, layer.weight.template cast<double>());
    WriteMatrix(out, layer.bias.template cast<double>());
  }
  out.close();
  if (!out) {
    return absl::UnavailableError(absl::StrCat(path, ": write failed"));
  }
  return absl::OkStatus();
}

template absl::Status WriteWeights(const std::string&, const std::vector<DenseLayer<float>>&);
template absl::Status WriteWeights(const std::string&, const std::vector<DenseLayer<double>>&);

absl::StatusOr<std::vector<Eigen::MatrixXd>> ReadWeights(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  char magic[sizeof(kMagic)];
  uint32_t count = 0;
  in.read(magic, sizeof(magic));
  in.read(reinterpret_cast<char*>(&count), sizeof(count));
  if (!in || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": not an overlap weights file"));
  }
  std::vector<Eigen::MatrixXd> tensors;
  for (uint32_t t = 0; t < count; ++t) {
    uint32_t rows = 0;
    uint32_t cols = 0;
    in.read(reinterpret_cast<char*>(&rows), sizeof(rows));
    in.read(reinterpret_cast<char*>(&cols), sizeof(cols));
    // 2^27 doubles (1 GiB) is far beyond any model here; a larger count means corruption.
    if (!in || uint64_t{rows} * cols > (uint64_t{1} << 27)) {
      return absl::DataLossError(absl::StrCat(path, ": bad header of tensor ", t));
    }
    Eigen::MatrixXd m(rows, cols);
    in.read(reinterpret_cast<char*>(m.data()),
            static_cast<std::streamsize>(sizeof(double) * m.size()));
    if (!in) {
      return absl::DataLossError(absl::StrCat(path, ": tensor ", t, " is truncated"));
    }
    tensors.push_back(std::move(m));
  }
  return tensors;
}

}  // namespace examples
}  // namespace overlap
