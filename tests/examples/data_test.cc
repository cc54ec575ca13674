// The Fashion-MNIST reader, the flag parser and the weights file.
#include <cstdio>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "examples/fashion_mnist.h"
#include "examples/train_flags.h"
#include "examples/weights_file.h"

namespace overlap {
namespace examples {
namespace {

TEST_CASE("the test split has 10,000 labelled 28x28 images in [0, 1]") {
  absl::StatusOr<Dataset> test = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTest);
  REQUIRE(test.ok());
  CHECK(test->size == 10000);
  CHECK(test->pixels.size() == size_t{10000} * 784);
  CHECK(test->labels.size() == 10000);
  std::vector<int> per_class(10, 0);
  for (uint8_t label : test->labels) {
    ++per_class[label];
  }
  // Fashion-MNIST's test split is balanced: 1,000 images per class.
  CHECK(per_class == std::vector<int>(10, 1000));
  float lo = 1.0f;
  float hi = 0.0f;
  for (float p : test->pixels) {
    lo = std::min(lo, p);
    hi = std::max(hi, p);
  }
  CHECK(lo == 0.0f);
  CHECK(hi == 1.0f);
}

TEST_CASE("a missing data directory is NotFound naming the file") {
  absl::StatusOr<Dataset> data = LoadFashionMnist("/nonexistent", Split::kTrain);
  REQUIRE(absl::IsNotFound(data.status()));
  CHECK(data.status().message().find("/nonexistent/train-images-idx3-ubyte.gz") !=
        absl::string_view::npos);
}

TEST_CASE("a file that is not IDX is DataLoss") {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  std::FILE* f = std::fopen((dir + "/t10k-images-idx3-ubyte.gz").c_str(), "wb");
  REQUIRE(f != nullptr);
  std::fputs("not an idx file", f);
  std::fclose(f);
  absl::StatusOr<Dataset> data = LoadFashionMnist(dir, Split::kTest);
  CHECK(absl::IsDataLoss(data.status()));
}

absl::StatusOr<TrainOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "mnist_mlp");
  std::vector<char*> argv;
  argv.reserve(args.size());
  for (std::string& a : args) {
    argv.push_back(a.data());
  }
  return ParseTrainFlags(static_cast<int>(argv.size()), argv.data());
}

TEST_CASE("flags parse in both spellings and keep defaults") {
  absl::StatusOr<TrainOptions> options =
      Parse({"--epochs=2", "--batch", "64", "--lr", "0.1", "--dump-weights", "/tmp/w"});
  REQUIRE(options.ok());
  CHECK(options->epochs == 2);
  CHECK(options->batch == 64);
  CHECK(options->learning_rate == Approx(0.1f));
  CHECK(options->dump_weights == "/tmp/w");
  CHECK(options->momentum == Approx(0.9f));
  CHECK(options->max_steps == 0);
  CHECK(options->precision == Precision::kFloat32);
  CHECK(Parse({"--precision", "float64"})->precision == Precision::kFloat64);
  CHECK(options->compression.empty());
  CHECK(options->warmup_epochs == 0);
  CHECK(options->momentum_correction == MomentumCorrection::kOff);
}

TEST_CASE("compression flags: spec, warm-up epochs, momentum correction") {
  absl::StatusOr<TrainOptions> options =
      Parse({"--compression", "covap:R=4", "--warmup-epochs=1", "--momentum-correction", "masked"});
  REQUIRE(options.ok());
  CHECK(options->compression == "covap:R=4");
  CHECK(options->warmup_epochs == 1);
  CHECK(options->momentum_correction == MomentumCorrection::kMasked);
  CHECK(Parse({"--momentum-correction", "on"})->momentum_correction == MomentumCorrection::kOn);
  CHECK(Parse({"--momentum-correction", "off"})->momentum_correction == MomentumCorrection::kOff);
}

TEST_CASE("the staleness correction is on (auto) by default and can be turned off") {
  CHECK(Parse({})->staleness_correction == StalenessCorrection::kAuto);
  CHECK(Parse({"--staleness-correction", "off"})->staleness_correction ==
        StalenessCorrection::kOff);
  CHECK(Parse({"--staleness-correction=auto"})->staleness_correction == StalenessCorrection::kAuto);
  CHECK(Parse({"--staleness-correction", "predict"})->staleness_correction ==
        StalenessCorrection::kPredict);
  CHECK(absl::IsInvalidArgument(Parse({"--staleness-correction", "maybe"}).status()));
}

TEST_CASE("bad flags are InvalidArgument naming the flag") {
  for (const auto& [args, needle] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--epochs", "zero"}, "--epochs"},
           {{"--batch=0"}, "--batch"},
           {{"--precision", "fp8"}, "--precision"},
           {{"--lr", "-1"}, "--lr"},
           {{"--bogus", "1"}, "unknown flag --bogus"},
           {{"--seed"}, "--seed needs a value"},
           {{"--compression="}, "--compression"},
           {{"--warmup-epochs", "-1"}, "--warmup-epochs"},
           {{"--momentum-correction", "yes"}, "--momentum-correction"},
           {{"stray"}, "unexpected argument 'stray'"}}) {
    absl::StatusOr<TrainOptions> options = Parse(args);
    INFO(needle);
    REQUIRE(absl::IsInvalidArgument(options.status()));
    CHECK(options.status().message().find(needle) != absl::string_view::npos);
  }
}

TEST_CASE("weights survive a round trip through the file") {
  Mlp<float> model({4, 3, 2}, 9);
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/w.bin";
  REQUIRE(WriteWeights(path, model.params()).ok());
  absl::StatusOr<std::vector<Eigen::MatrixXd>> read = ReadWeights(path);
  REQUIRE(read.ok());
  REQUIRE(read->size() == 4);
  CHECK((*read)[0] == model.params()[0].weight.cast<double>());
  CHECK((*read)[1] == Eigen::MatrixXd(model.params()[0].bias.cast<double>()));
  CHECK((*read)[2] == model.params()[1].weight.cast<double>());
  CHECK(absl::IsNotFound(ReadWeights("/nonexistent/w.bin").status()));
}

}  // namespace
}  // namespace examples
}  // namespace overlap
