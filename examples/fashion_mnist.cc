#include "examples/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace overlap {
namespace examples {
namespace {

// IDX magic numbers: two zero bytes, the element type (0x08 = unsigned byte), the rank.
constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

absl::StatusOr<GzFile> OpenGz(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat(path, ": no such file (install the Debian package dataset-fashion-mnist)"));
    }
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  return GzFile(file);
}

absl::Status ReadExactly(gzFile file, const std::string& path, void* out, size_t bytes) {
  // gzread takes an unsigned int count, so large payloads are read in chunks.
  auto* dst = static_cast<unsigned char*>(out);
  while (bytes > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes, size_t{1} << 30));
    const int got = gzread(file, dst, chunk);
    if (got <= 0) {
      int zerr = 0;
      const char* msg = gzerror(file, &zerr);
      return absl::DataLossError(absl::StrCat(path, ": truncated or corrupt (",
                                              zerr == Z_OK ? "unexpected end of file" : msg, ")"));
    }
    dst += got;
    bytes -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ReadBigEndian32(gzFile file, const std::string& path) {
  std::array<unsigned char, 4> b;
  absl::Status status = ReadExactly(file, path, b.data(), b.size());
  if (!status.ok()) {
    return status;
  }
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

// Reads an IDX header: the magic number, then one big-endian count per dimension.
absl::StatusOr<std::vector<uint32_t>> ReadIdxHeader(gzFile file, const std::string& path,
                                                    uint32_t magic, int rank) {
  absl::StatusOr<uint32_t> got = ReadBigEndian32(file, path);
  if (!got.ok()) {
    return got.status();
  }
  if (*got != magic) {
    return absl::DataLossError(absl::StrCat(path, ": bad IDX magic number 0x",
                                            absl::Hex(*got, absl::kZeroPad8), ", expected 0x",
                                            absl::Hex(magic, absl::kZeroPad8)));
  }
  std::vector<uint32_t> dims;
  for (int i = 0; i < rank; ++i) {
    absl::StatusOr<uint32_t> dim = ReadBigEndian32(file, path);
    if (!dim.ok()) {
      return dim.status();
    }
    dims.push_back(*dim);
  }
  return dims;
}

absl::Status ReadImages(const std::string& path, Dataset* data) {
  absl::StatusOr<GzFile> file = OpenGz(path);
  if (!file.ok()) {
    return file.status();
  }
  absl::StatusOr<std::vector<uint32_t>> dims = ReadIdxHeader(file->get(), path, kImagesMagic, 3);
  if (!dims.ok()) {
    return dims.status();
  }
  if ((*dims)[1] != 28 || (*dims)[2] != 28) {
    return absl::DataLossError(
        absl::StrCat(path, ": images are ", (*dims)[1], "x", (*dims)[2], ", expected 28x28"));
  }
  data->size = (*dims)[0];
  std::vector<uint8_t> raw(static_cast<size_t>(data->size) * Dataset::kPixels);
  absl::Status status = ReadExactly(file->get(), path, raw.data(), raw.size());
  if (!status.ok()) {
    return status;
  }
  data->pixels.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    data->pixels[i] = raw[i] / 255.0f;
  }
  return absl::OkStatus();
}

absl::Status ReadLabels(const std::string& path, Dataset* data) {
  absl::StatusOr<GzFile> file = OpenGz(path);
  if (!file.ok()) {
    return file.status();
  }
  absl::StatusOr<std::vector<uint32_t>> dims = ReadIdxHeader(file->get(), path, kLabelsMagic, 1);
  if (!dims.ok()) {
    return dims.status();
  }
  if ((*dims)[0] != data->size) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", (*dims)[0], " labels for ", data->size, " images"));
  }
  data->labels.resize(data->size);
  absl::Status status = ReadExactly(file->get(), path, data->labels.data(), data->labels.size());
  if (!status.ok()) {
    return status;
  }
  for (int64_t i = 0; i < data->size; ++i) {
    if (data->labels[i] >= Dataset::kClasses) {
      return absl::DataLossError(absl::StrCat(path, ": label ", int{data->labels[i]}, " of image ",
                                              i, " is not a class in [0, 10)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Dataset> LoadFashionMnist(absl::string_view dir, Split split) {
  const std::string prefix = absl::StrCat(dir, split == Split::kTrain ? "/train" : "/t10k");
  Dataset data;
  absl::Status status = ReadImages(absl::StrCat(prefix, "-images-idx3-ubyte.gz"), &data);
  if (!status.ok()) {
    return status;
  }
  status = ReadLabels(absl::StrCat(prefix, "-labels-idx1-ubyte.gz"), &data);
  if (!status.ok()) {
    return status;
  }
  return data;
}

}  // namespace examples
}  // namespace overlap
