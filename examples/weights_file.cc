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

void WriteMatrix(std::ofstream& out, const float* data, uint32_t rows, uint32_t cols) {
  out.write(reinterpret_cast<const char*>(&rows), sizeof(rows));
  out.write(reinterpret_cast<const char*>(&cols), sizeof(cols));
  out.write(reinterpret_cast<const char*>(data),
            static_cast<std::streamsize>(sizeof(float) * rows * cols));
}

}  // namespace

absl::Status WriteWeights(const std::string& path, const std::vector<DenseLayer>& params) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open for writing: ", std::strerror(errno)));
  }
  out.write(kMagic, sizeof(kMagic));
  const uint32_t count = static_cast<uint32_t>(2 * params.size());
  out.write(reinterpret_cast<const char*>(&count), sizeof(count));
  for (const DenseLayer& layer : params) {
    WriteMatrix(out, layer.weight.data(), static_cast<uint32_t>(layer.weight.rows()),
                static_cast<uint32_t>(layer.weight.cols()));
    WriteMatrix(out, layer.bias.data(), static_cast<uint32_t>(layer.bias.size()), 1);
  }
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Eigen::MatrixXf>> ReadWeights(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  char magic[sizeof(kMagic)];
  uint32_t count = 0;
  in.read(magic, sizeof(magic));
  in.read(reinterpret_cast<char*>(&count), sizeof(count));
  if (!in || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": not an overlap weights file"));
  }
  std::vector<Eigen::MatrixXf> tensors;
  for (uint32_t t = 0; t < count; ++t) {
    uint32_t rows = 0;
    uint32_t cols = 0;
    in.read(reinterpret_cast<char*>(&rows), sizeof(rows));
    in.read(reinterpret_cast<char*>(&cols), sizeof(cols));
    // 2^28 floats (1 GiB) is far beyond any model here; a larger count means corruption.
    if (!in || uint64_t{rows} * cols > (uint64_t{1} << 28)) {
      return absl::DataLossError(absl::StrCat(path, ": bad header of tensor ", t));
    }
    Eigen::MatrixXf m(rows, cols);
    in.read(reinterpret_cast<char*>(m.data()),
            static_cast<std::streamsize>(sizeof(float) * m.size()));
    if (!in) return absl::DataLossError(absl::StrCat(path, ": tensor ", t, " is truncated"));
    tensors.push_back(std::move(m));
  }
  return tensors;
}

}  // namespace examples
}  // namespace overlap
