// Fashion-MNIST reader: the four gzipped IDX files of the Debian package dataset-fashion-mnist.
//
// The whole split is decoded into memory once (60,000 x 784 floats is 188 MB for train), so the
// training loop only gathers columns; nothing here is thread-aware.
#ifndef OVERLAP_EXAMPLES_FASHION_MNIST_H_
#define OVERLAP_EXAMPLES_FASHION_MNIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {
namespace examples {

// Where dataset-fashion-mnist installs its files.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// One split of the data set. Images are stored sample after sample (image i occupies
// pixels[i * kPixels, (i + 1) * kPixels)), scaled to [0, 1], which is exactly the memory of a
// column-major kPixels x size matrix: one column per image.
struct Dataset {
  static constexpr int kPixels = 28 * 28;
  static constexpr int kClasses = 10;

  int64_t size = 0;
  std::vector<float> pixels;
  std::vector<uint8_t> labels;  // each in [0, kClasses)
};

enum class Split { kTrain, kTest };

// Reads "<dir>/train-images-idx3-ubyte.gz" and its labels file (or the t10k pair for kTest).
// NotFound naming the path when a file is missing; DataLoss naming the path and what is wrong
// when a file is truncated, has the wrong magic number or the images and labels disagree.
absl::StatusOr<Dataset> LoadFashionMnist(absl::string_view dir, Split split);

}  // namespace examples
}  // namespace overlap

#endif  // OVERLAP_EXAMPLES_FASHION_MNIST_H_
