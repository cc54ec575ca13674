#include "examples/mlp.h"

#include <vector>

#include "catch2/catch.hpp"
#include "examples/sgd.h"
#include "examples/shard.h"

namespace overlap {
namespace examples {
namespace {

Eigen::MatrixXd RandomBatch(int rows, int cols, unsigned seed) {
  std::srand(seed);
  return Eigen::MatrixXd::Random(rows, cols);
}

double Loss(Mlp<double>& model, const Eigen::MatrixXd& x, const std::vector<uint8_t>& labels) {
  model.Forward(x);
  return model.Backward(labels, 1.0f, [](int) {});
}

TEST_CASE("backward matches finite differences of the loss") {
  Mlp<double> model({6, 5, 4, 3}, 7);
  const Eigen::MatrixXd x = RandomBatch(6, 4, 1);
  const std::vector<uint8_t> labels = {0, 2, 1, 2};
  model.Forward(x);
  model.Backward(labels, 1.0f, [](int) {});
  const std::vector<DenseLayer<double>> grads = model.grads();

  const double eps = 1e-6;
  for (int l = 0; l < model.num_layers(); ++l) {
    for (Eigen::Index i = 0; i < model.params()[l].weight.size(); i += 3) {
      double& w = model.params()[l].weight.data()[i];
      const double saved = w;
      w = saved + eps;
      const double up = Loss(model, x, labels);
      w = saved - eps;
      const double down = Loss(model, x, labels);
      w = saved;
      CHECK(grads[l].weight.data()[i] == Approx((up - down) / (2 * eps)).margin(1e-7));
    }
    for (Eigen::Index i = 0; i < model.params()[l].bias.size(); ++i) {
      double& b = model.params()[l].bias[i];
      const double saved = b;
      b = saved + eps;
      const double up = Loss(model, x, labels);
      b = saved - eps;
      const double down = Loss(model, x, labels);
      b = saved;
      CHECK(grads[l].bias[i] == Approx((up - down) / (2 * eps)).margin(1e-7));
    }
  }
}

TEST_CASE("backward reports layers last to first, each once") {
  Mlp<double> model({6, 5, 4, 3}, 7);
  model.Forward(RandomBatch(6, 2, 2));
  std::vector<int> order;
  model.Backward({1, 0}, 1.0, [&](int l) { order.push_back(l); });
  CHECK(order == std::vector<int>{2, 1, 0});
}

TEST_CASE("the same seed gives the same model, another seed another") {
  Mlp<float> a({6, 5, 3}, 11);
  Mlp<float> b({6, 5, 3}, 11);
  Mlp<float> c({6, 5, 3}, 12);
  Mlp<double> d({6, 5, 3}, 11);
  CHECK(a.params()[0].weight == b.params()[0].weight);
  CHECK(a.params()[0].weight != c.params()[0].weight);
  // He-uniform limit sqrt(6 / fan_in) = 1 for fan_in 6.
  CHECK(a.params()[0].weight.cwiseAbs().maxCoeff() <= 1.0f);
  CHECK(a.params()[0].bias.isZero());
  // Both precisions round the same draws.
  CHECK(d.params()[0].weight.cast<float>() == a.params()[0].weight);
}

// The data-parallel identity the demo relies on: shard gradients scaled by size / rows and then
// averaged equal the gradient of the whole batch, for an uneven split and an empty shard too.
TEST_CASE("averaged scaled shard gradients equal the global-batch gradient") {
  const int rows = 7;
  const Eigen::MatrixXd x = RandomBatch(6, rows, 3);
  const std::vector<uint8_t> labels = {0, 1, 2, 0, 1, 2, 2};
  Mlp<double> whole({6, 5, 3}, 5);
  whole.Forward(x);
  whole.Backward(labels, 1.0 / rows, [](int) {});

  for (int size : {3, 4, 8}) {
    Eigen::MatrixXd weight_sum = Eigen::MatrixXd::Zero(5, 6);
    Eigen::VectorXd bias_sum = Eigen::VectorXd::Zero(3);
    for (int rank = 0; rank < size; ++rank) {
      const RowRange mine = ShardOf(rows, rank, size);
      Mlp<double> part({6, 5, 3}, 5);
      part.Forward(x.middleCols(mine.begin, mine.count));
      part.Backward(std::vector<uint8_t>(labels.begin() + mine.begin,
                                         labels.begin() + mine.begin + mine.count),
                    static_cast<double>(size) / rows, [](int) {});
      weight_sum += part.grads()[0].weight;
      bias_sum += part.grads()[1].bias;
    }
    INFO("ranks " << size);
    CHECK((weight_sum / size - whole.grads()[0].weight).cwiseAbs().maxCoeff() < 1e-12);
    CHECK((bias_sum / size - whole.grads()[1].bias).cwiseAbs().maxCoeff() < 1e-12);
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
  std::vector<DenseLayer<float>> params = {{Eigen::MatrixXf::Ones(1, 1), Eigen::VectorXf::Zero(1)}};
  std::vector<DenseLayer<float>> grads = {{Eigen::MatrixXf::Ones(1, 1), Eigen::VectorXf::Ones(1)}};
  MomentumSgd<float> sgd(params, 0.5f, 0.9f);
  sgd.Step(grads, params);  // v = 1, w = 1 - 0.5
  CHECK(params[0].weight(0, 0) == Approx(0.5f));
  sgd.Step(grads, params);  // v = 1.9, w = 0.5 - 0.95
  CHECK(params[0].weight(0, 0) == Approx(-0.45f));
  CHECK(params[0].bias[0] == Approx(-1.45f));
}

TEST_CASE("momentum correction: averaged local velocities equal momentum on the average") {
  // Two ranks, two steps: velocity of the average gradient vs average of the ranks' velocities.
  const std::vector<std::vector<float>> grad = {{1.0f, 3.0f}, {-2.0f, 0.5f}};  // [rank][step]
  std::vector<DenseLayer<float>> shape = {{Eigen::MatrixXf::Zero(1, 1), Eigen::VectorXf::Zero(1)}};
  std::vector<LocalMomentum<float>> ranks(2, LocalMomentum<float>(shape, 0.9f, false));
  float global_velocity = 0.0f;
  for (int step = 0; step < 2; ++step) {
    float average = 0.0f;
    for (int r = 0; r < 2; ++r) {
      DenseLayer<float> g = {Eigen::MatrixXf::Constant(1, 1, grad[r][step]),
                             Eigen::VectorXf::Constant(1, grad[r][step])};
      ranks[r].Accumulate(g, 0);
      average += g.weight(0, 0) / 2;
      CHECK(g.bias[0] == g.weight(0, 0));
    }
    global_velocity = 0.9f * global_velocity + (grad[0][step] + grad[1][step]) / 2;
    CHECK(average == Approx(global_velocity));
  }
}

TEST_CASE("momentum factor masking restarts the velocity where a value arrived") {
  std::vector<DenseLayer<float>> shape = {{Eigen::MatrixXf::Zero(1, 2), Eigen::VectorXf::Zero(1)}};
  for (const bool masking : {false, true}) {
    LocalMomentum<float> local(shape, 0.5f, masking);
    DenseLayer<float> g = {Eigen::MatrixXf::Ones(1, 2), Eigen::VectorXf::Ones(1)};
    local.Accumulate(g, 0);
    // The allreduce delivered the first weight only (a sparsifier's result).
    std::vector<DenseLayer<float>> reduced = {
        {(Eigen::MatrixXf(1, 2) << 1.0f, 0.0f).finished(), Eigen::VectorXf::Zero(1)}};
    local.Mask(reduced);
    g = {Eigen::MatrixXf::Ones(1, 2), Eigen::VectorXf::Ones(1)};
    local.Accumulate(g, 0);
    CHECK(g.weight(0, 0) == (masking ? 1.0f : 1.5f));
    CHECK(g.weight(0, 1) == 1.5f);
    CHECK(g.bias[0] == 1.5f);
  }
}

}  // namespace
}  // namespace examples
}  // namespace overlap
