#include "examples/mlp.h"

#include <vector>

#include "catch2/catch.hpp"
#include "examples/sgd.h"
#include "examples/shard.h"

namespace overlap {
namespace examples {
namespace {

Eigen::MatrixXf RandomBatch(int rows, int cols, unsigned seed) {
  std::srand(seed);
  return Eigen::MatrixXf::Random(rows, cols);
}

double Loss(Mlp& model, const Eigen::MatrixXf& x, const std::vector<uint8_t>& labels) {
  model.Forward(x);
  return model.Backward(labels, 1.0f, [](int) {});
}

TEST_CASE("backward matches finite differences of the loss") {
  Mlp model({6, 5, 4, 3}, 7);
  const Eigen::MatrixXf x = RandomBatch(6, 4, 1);
  const std::vector<uint8_t> labels = {0, 2, 1, 2};
  model.Forward(x);
  model.Backward(labels, 1.0f, [](int) {});
  const std::vector<DenseLayer> grads = model.grads();

  const float eps = 1e-2f;
  for (int l = 0; l < model.num_layers(); ++l) {
    for (Eigen::Index i = 0; i < model.params()[l].weight.size(); i += 3) {
      float& w = model.params()[l].weight.data()[i];
      const float saved = w;
      w = saved + eps;
      const double up = Loss(model, x, labels);
      w = saved - eps;
      const double down = Loss(model, x, labels);
      w = saved;
      CHECK(grads[l].weight.data()[i] == Approx((up - down) / (2 * eps)).margin(2e-3));
    }
    for (Eigen::Index i = 0; i < model.params()[l].bias.size(); ++i) {
      float& b = model.params()[l].bias[i];
      const float saved = b;
      b = saved + eps;
      const double up = Loss(model, x, labels);
      b = saved - eps;
      const double down = Loss(model, x, labels);
      b = saved;
      CHECK(grads[l].bias[i] == Approx((up - down) / (2 * eps)).margin(2e-3));
    }
  }
}

TEST_CASE("backward reports layers last to first, each once") {
  Mlp model({6, 5, 4, 3}, 7);
  model.Forward(RandomBatch(6, 2, 2));
  std::vector<int> order;
  model.Backward({1, 0}, 1.0f, [&](int l) { order.push_back(l); });
  CHECK(order == std::vector<int>{2, 1, 0});
}

TEST_CASE("the same seed gives the same model, another seed another") {
  Mlp a({6, 5, 3}, 11);
  Mlp b({6, 5, 3}, 11);
  Mlp c({6, 5, 3}, 12);
  CHECK(a.params()[0].weight == b.params()[0].weight);
  CHECK(a.params()[0].weight != c.params()[0].weight);
  // He-uniform limit sqrt(6 / fan_in) = 1 for fan_in 6.
  CHECK(a.params()[0].weight.cwiseAbs().maxCoeff() <= 1.0f);
  CHECK(a.params()[0].bias.isZero());
}

// The data-parallel identity the demo relies on: shard gradients scaled by size / rows and then
// averaged equal the gradient of the whole batch, for an uneven split and an empty shard too.
TEST_CASE("averaged scaled shard gradients equal the global-batch gradient") {
  const int rows = 7;
  const Eigen::MatrixXf x = RandomBatch(6, rows, 3);
  const std::vector<uint8_t> labels = {0, 1, 2, 0, 1, 2, 2};
  Mlp whole({6, 5, 3}, 5);
  whole.Forward(x);
  whole.Backward(labels, 1.0f / rows, [](int) {});

  for (int size : {3, 4, 8}) {
    Eigen::MatrixXf weight_sum = Eigen::MatrixXf::Zero(5, 6);
    Eigen::VectorXf bias_sum = Eigen::VectorXf::Zero(3);
    for (int rank = 0; rank < size; ++rank) {
      const RowRange mine = ShardOf(rows, rank, size);
      Mlp part({6, 5, 3}, 5);
      part.Forward(x.middleCols(mine.begin, mine.count));
      part.Backward(std::vector<uint8_t>(labels.begin() + mine.begin,
                                         labels.begin() + mine.begin + mine.count),
                    static_cast<float>(size) / rows, [](int) {});
      weight_sum += part.grads()[0].weight;
      bias_sum += part.grads()[1].bias;
    }
    INFO("ranks " << size);
    CHECK((weight_sum / size - whole.grads()[0].weight).cwiseAbs().maxCoeff() < 1e-6f);
    CHECK((bias_sum / size - whole.grads()[1].bias).cwiseAbs().maxCoeff() < 1e-6f);
  }
}

TEST_CASE("shards cover the batch contiguously, earlier ranks taking the remainder") {
  CHECK(ShardOf(10, 0, 4).begin == 0);
  CHECK(ShardOf(10, 0, 4).count == 3);
  CHECK(ShardOf(10, 1, 4).begin == 3);
  CHECK(ShardOf(10, 1, 4).count == 3);
  CHECK(ShardOf(10, 2, 4).begin == 6);
  CHECK(ShardOf(10, 2, 4).count == 2);
  CHECK(ShardOf(10, 3, 4).begin == 8);
  CHECK(ShardOf(2, 3, 4).count == 0);
}

TEST_CASE("momentum SGD accumulates velocity") {
  std::vector<DenseLayer> params = {{Eigen::MatrixXf::Ones(1, 1), Eigen::VectorXf::Zero(1)}};
  std::vector<DenseLayer> grads = {{Eigen::MatrixXf::Ones(1, 1), Eigen::VectorXf::Ones(1)}};
  MomentumSgd sgd(params, 0.5f, 0.9f);
  sgd.Step(grads, params);  // v = 1, w = 1 - 0.5
  CHECK(params[0].weight(0, 0) == Approx(0.5f));
  sgd.Step(grads, params);  // v = 1.9, w = 0.5 - 0.95
  CHECK(params[0].weight(0, 0) == Approx(-0.45f));
  CHECK(params[0].bias[0] == Approx(-1.45f));
}

}  // namespace
}  // namespace examples
}  // namespace overlap
