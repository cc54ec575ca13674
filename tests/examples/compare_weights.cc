// compare_weights A B [--atol X] [--rtol Y]: compares two weights files written by
// mnist_mlp --dump-weights, prints the largest absolute and relative element difference, and
// exits 1 if any element differs by more than atol + rtol * |b| (numpy's allclose rule).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "examples/weights_file.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "compare_weights: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 7) {
    return Fail("usage: compare_weights A B [--atol X --rtol Y]");
  }
  double atol = 1e-5;
  double rtol = 1e-3;
  if (argc == 7 && (std::string(argv[3]) != "--atol" || !absl::SimpleAtod(argv[4], &atol) ||
                    std::string(argv[5]) != "--rtol" || !absl::SimpleAtod(argv[6], &rtol))) {
    return Fail("usage: compare_weights A B [--atol X --rtol Y]");
  }
  auto a = overlap::examples::ReadWeights(argv[1]);
  if (!a.ok()) {
    return Fail(std::string(a.status().message()));
  }
  auto b = overlap::examples::ReadWeights(argv[2]);
  if (!b.ok()) {
    return Fail(std::string(b.status().message()));
  }
  if (a->size() != b->size()) {
    return Fail("the files hold different numbers of tensors");
  }

  double max_abs = 0.0;
  double max_rel = 0.0;
  int64_t violations = 0;
  int64_t elements = 0;
  for (size_t t = 0; t < a->size(); ++t) {
    const Eigen::MatrixXd& x = (*a)[t];
    const Eigen::MatrixXd& y = (*b)[t];
    if (x.rows() != y.rows() || x.cols() != y.cols()) {
      return Fail("tensor " + std::to_string(t) + " has different shapes");
    }
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      const double diff = std::fabs(x.data()[i] - y.data()[i]);
      const double scale = std::fabs(y.data()[i]);
      max_abs = std::max(max_abs, diff);
      if (scale > 0) {
        max_rel = std::max(max_rel, diff / scale);
      }
      // NaN compares false, so it counts as a violation.
      if (!(diff <= atol + rtol * scale)) {
        ++violations;
      }
      ++elements;
    }
  }
  std::printf(
      "%lld elements in %zu tensors: max abs diff %.3g, max rel diff %.3g, "
      "%lld outside atol %.3g + rtol %.3g\n",
      static_cast<long long>(elements), a->size(), max_abs, max_rel,
      static_cast<long long>(violations), atol, rtol);
  return violations == 0 ? 0 : 1;
}
