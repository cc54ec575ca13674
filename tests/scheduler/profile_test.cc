#include "scheduler/profile.h"

#include <catch2/catch.hpp>

#include "scheduler/builtin.h"
#include "scheduler/model_zoo.h"
#include "scheduler/pipedream.h"

namespace overlap::sched {
namespace {

const char* kGood = R"({"model": "m", "update_ms": 2,
  "layers": [
    {"name": "a", "forward_ms": 1, "backward_ms": 2, "tensors": [{"name": "a.w", "bytes": 8}]},
    {"name": "b", "forward_ms": 3, "backward_ms": 4,
     "tensors": [{"name": "b.w", "bytes": 16}, {"name": "b.h", "bytes": 6, "dtype": "fp16"}]}
  ]})";

TEST_CASE("ParseProfileJson derives ready and first-use times") {
  auto p = ParseProfileJson(kGood);
  REQUIRE(p.ok());
  CHECK(p->forward_ms == 4);
  CHECK(p->backward_ms == 6);
  CHECK(p->compute_ms() == 12);
  CHECK(p->total_bytes == 30);
  REQUIRE(p->tensors.size() == 3);
  // Backward runs b then a: b's gradients are ready at 4, a's at 6.
  CHECK(p->tensors[0].ready_ms == 6);
  CHECK(p->tensors[1].ready_ms == 4);
  CHECK(p->tensors[0].first_use_ms == 0);
  CHECK(p->tensors[2].first_use_ms == 1);
  CHECK(p->tensors[2].dtype == DataType::kFloat16);
  CHECK(p->tensors[2].count() == 3);
  // ToJson round-trips.
  auto again = ParseProfileJson(p->ToJson());
  REQUIRE(again.ok());
  CHECK(again->ToJson() == p->ToJson());
}

TEST_CASE("A tensor's may_delay is optional, kept by ToJson and checked for type") {
  const char* json =
      R"({"model": "m", "update_ms": 0, "layers": [{"name": "l", "forward_ms": 1,
          "backward_ms": 1, "tensors": [{"name": "g", "bytes": 8},
                                        {"name": "stats", "bytes": 8, "may_delay": false}]}]})";
  auto p = ParseProfileJson(json);
  REQUIRE(p.ok());
  CHECK(p->tensors[0].may_delay);
  CHECK_FALSE(p->tensors[1].may_delay);
  auto again = ParseProfileJson(p->ToJson());
  REQUIRE(again.ok());
  CHECK(again->tensors[0].may_delay);
  CHECK_FALSE(again->tensors[1].may_delay);
  std::string bad = json;
  bad.replace(bad.find("false"), 5, "0");
  CHECK(ParseProfileJson(bad).status().message() ==
        "<string>: layers[0].tensors[1].may_delay: must be true or false");
}

TEST_CASE("ParseProfileJson names the field and cause of bad input") {
  struct Case {
    const char* json;
    const char* expect;
  };
  const Case cases[] = {
      {R"({"model": "m", "update_ms": 1, "layers": [)", "line 1 column"},
      {R"([1, 2])", "top level must be an object"},
      {R"({"update_ms": 1, "layers": []})", "model: missing"},
      {R"({"model": "m", "update_ms": "x", "layers": []})", "update_ms: must be a number"},
      {R"({"model": "m", "update_ms": 1, "layers": []})", "no tensors"},
      {R"({"model": "m", "update_ms": 1, "layers": [{"name": "a", "forward_ms": 1,
          "backward_ms": 1, "tensors": [{"name": "w", "bytes": 1.5}]}]})",
       "layers[0].tensors[0].bytes: must be an integer"},
      {R"({"model": "m", "update_ms": 1, "layers": [{"name": "a", "forward_ms": 1,
          "backward_ms": 1, "tensors": [{"name": "w", "bytes": -4}]}]})",
       "bytes must be > 0"},
      {R"({"model": "m", "update_ms": 1, "layers": [{"name": "a", "forward_ms": 1,
          "backward_ms": 1, "tensors": [{"name": "w", "bytes": 6}]}]})",
       "multiple of 4"},
      {R"({"model": "m", "update_ms": 1, "layers": [{"name": "a", "forward_ms": -1,
          "backward_ms": 1, "tensors": [{"name": "w", "bytes": 4}]}]})",
       "forward_ms and backward_ms must be finite"},
      {R"({"model": "m", "update_ms": 1, "layers": [{"name": "a", "forward_ms": 1,
          "backward_ms": 1, "tensors": [{"name": "w", "bytes": 4}, {"name": "w", "bytes": 4}]}]})",
       "duplicate tensor name"},
      {R"({"model": "m", "update_ms": 1, "layers": [{"name": "a", "forward_ms": 1,
          "backward_ms": 1, "tensors": [{"name": "w", "bytes": 4, "dtype": "float12"}]}]})",
       "dtype"},
      // Found by tests/fuzz/profile_fuzz: a number beyond double escaped as an exception.
      {R"({"model": "m", "update_ms": 1e400, "layers": []})", "number overflow parsing '1e400'"},
  };
  for (const Case& c : cases) {
    auto p = ParseProfileJson(c.json, "bad.json");
    INFO(c.json);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(p.status().message()), Catch::Contains("bad.json"));
    CHECK_THAT(std::string(p.status().message()), Catch::Contains(c.expect));
  }
}

TEST_CASE("SynchronousBoundMs adds the compute after the last first use and before the first gradient") {
  Profile p;
  p.model = "m";
  p.update_ms = 1;
  p.AddLayer("a", 1, 4, {{"a.w", 8}});
  p.AddLayer("b", 2, 5, {{"b.w", 8}});
  p.AddLayer("loss", 3, 6, {});  // no gradient of its own
  REQUIRE(p.Finalize().ok());
  // b.w is read last, 1 ms into forward, leaving 2 + 3; backward makes it first, after 6 + 5.
  CHECK(SynchronousBoundMs(p, 10) == Approx(10 + (2 + 3) + (6 + 5)));
  CHECK(SynchronousBoundMs(p, 1) == Approx(p.compute_ms()));  // compute-bound: 22 ms
  CHECK(p.compute_ms() == Approx(22));
  // On BERT-base the pooler and prediction head hide nothing: 22% of its compute.
  const Profile bert = *LoadBuiltinProfile("bert-base");
  const double unhidden = SynchronousBoundMs(bert, 1e6) - 1e6;
  CHECK(unhidden / bert.compute_ms() == Approx(0.225).margin(0.005));
}

TEST_CASE("LoadProfileJson reports a missing file") {
  auto p = LoadProfileJson("/nonexistent/profile.json");
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("PipeDream graphs load in topological order with input time dropped") {
  const char* text =
      "node3 -- Linear(in_features=4, out_features=2, bias=True) -- forward_compute_time=1.0, "
      "backward_compute_time=2.0, activation_size=1024.0, parameter_size=40.000\n"
      "node1 -- Input -- forward_compute_time=500.0, backward_compute_time=0.0, "
      "activation_size=64.0, parameter_size=0.0\n"
      "node2 -- ReLU(inplace) -- forward_compute_time=0.5, backward_compute_time=0.25, "
      "activation_size=64.0, parameter_size=0.0\n"
      "\tnode1 -- node2\n\tnode2 -- node3\n";
  auto nodes = ParsePipeDreamGraph(text, "g.txt");
  REQUIRE(nodes.ok());
  REQUIRE(nodes->size() == 3);
  CHECK((*nodes)[0].id == 1);
  CHECK((*nodes)[2].id == 3);
  auto p = PipeDreamToProfile(*nodes, "toy", 0.5);
  REQUIRE(p.ok());
  CHECK(p->forward_ms == 1.5);  // the Input node's 500 ms is data loading
  CHECK(p->tensors.size() == 1);
  CHECK(p->tensors[0].bytes == 40);
  CHECK(p->tensors[0].first_use_ms == 0.5);

  CHECK_FALSE(ParsePipeDreamGraph("node1 -- X -- forward_compute_time=abc", "g").ok());
  CHECK_FALSE(ParsePipeDreamGraph(std::string(text) + "\tnode3 -- node1\n", "g").ok());  // cycle
  auto unknown = ParsePipeDreamGraph(std::string(text) + "\tnode3 -- node9\n", "g.txt");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(std::string(unknown.status().message()), Catch::Contains("node9"));
}

int64_t Params(const Profile& p, const std::string& prefix) {
  int64_t n = 0;
  for (const TensorInfo& t : p.tensors) {
    if (t.name.rfind(prefix, 0) == 0) {
      n += t.count();
    }
  }
  return n;
}

TEST_CASE("Bundled profiles load and transformers have their exact parameter counts") {
  for (const std::string& name : BuiltinModelNames()) {
    INFO(name);
    auto p = LoadBuiltinProfile(name);
    REQUIRE(p.ok());
    CHECK(p->forward_ms > 0);
    CHECK(p->backward_ms > 0);
    CHECK(p->update_ms > 0);
  }
  // Published sizes: BertModel base 109,482,240 and large 335,141,888; GPT-2 124,439,808 and
  // 354,823,168 (LM head tied to the token embedding).
  CHECK(Params(*LoadBuiltinProfile("bert-base"), "bert.") == 109482240);
  CHECK(Params(*LoadBuiltinProfile("bert-large"), "bert.") == 335141888);
  CHECK(Params(*LoadBuiltinProfile("gpt2-small"), "") == 124439808);
  CHECK(Params(*LoadBuiltinProfile("gpt2-medium"), "") == 354823168);
  // PipeDream's measured totals (README of ../shared/profiles) minus the input node's data
  // loading time (ResNet-50 18.962 ms, VGG-16 17.972 ms): 201.5 / 260.9 ms and 251.9 / 438.6 ms.
  CHECK(LoadBuiltinProfile("resnet50")->forward_ms == Approx(201.5 - 18.962).margin(0.1));
  CHECK(LoadBuiltinProfile("resnet50")->backward_ms == Approx(260.9).margin(0.1));
  CHECK(LoadBuiltinProfile("vgg16")->forward_ms == Approx(251.9 - 17.972).margin(0.1));
  CHECK(LoadBuiltinProfile("vgg16")->backward_ms == Approx(438.6).margin(0.1));
  CHECK(LoadBuiltinProfile("resnet50")->tensors.size() == 107);
  // VGG-16 has 553.4 MB of parameters.
  CHECK(LoadBuiltinProfile("vgg16")->total_bytes == Approx(553.4e6).epsilon(1e-3));
  auto missing = LoadBuiltinProfile("alexnet-xl");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("bert-base"));
}

TEST_CASE("The FLOP model reproduces its calibration data in aggregate") {
  // A Linear layer of known size at 1 TFLOP/s forward takes exactly FLOPs / 1e12 s.
  PipeDreamNode linear{1,
                       "Linear(in_features=1000, out_features=1000, bias=True)",
                       0.256,
                       0.512,
                       4.0 * 128 * 1000,
                       4004000};
  PipeDreamNode relu{2, "ReLU(inplace)", 1.0, 2.0, 1e9, 0};
  auto c = CalibrateOnPipeDream({{linear, relu}}, 128);
  REQUIRE(c.ok());
  CHECK(c->matmul_forward_tflops == Approx(1.0));
  CHECK(c->matmul_backward_tflops == Approx(1.0));
  CHECK(c->elementwise_forward_ms_per_gb == Approx(1.0));
  CHECK(c->elementwise_backward_ms_per_gb == Approx(2.0));
  CHECK_FALSE(CalibrateOnPipeDream({{relu}}, 128).ok());
}

}  // namespace
}  // namespace overlap::sched
