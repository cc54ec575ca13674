#include "scheduler/cluster/trace.h"

#include <catch2/catch.hpp>
#include <map>

#include "scheduler/builtin.h"
#include "scheduler/cluster/trace_gen.h"
#include "scheduler/planner.h"

namespace overlap::sched::cluster {
namespace {

std::string ErrorOf(const absl::Status& s) { return {s.message().begin(), s.message().end()}; }

absl::Status Check(const std::string& text, int gpus = 64) {
  absl::StatusOr<Trace> t = ParseTraceJson(text, "t.json");
  if (!t.ok()) {
    return t.status();
  }
  return ValidateTrace(*t, gpus, BuiltinModelNames(), PlannerNames());
}

TEST_CASE("A trace parses, with defaults for id and planner") {
  absl::StatusOr<Trace> t = ParseTraceJson(R"({"jobs": [
      {"id": "a", "arrival_s": 0, "model": "resnet50", "workers": 4, "iterations": 10},
      {"arrival_s": 2.5, "model": "vgg16", "workers": 1, "iterations": 3, "planner": "deft"}]})");
  REQUIRE(t.ok());
  REQUIRE(t->jobs.size() == 2);
  CHECK(t->jobs[0].id == "a");
  CHECK(t->jobs[0].planner.empty());
  CHECK(t->jobs[1].id == "job1");
  CHECK(t->jobs[1].arrival_s == 2.5);
  CHECK(t->jobs[1].planner == "deft");
  CHECK(ValidateTrace(*t, 64, BuiltinModelNames(), PlannerNames()).ok());
  // ToJson round-trips.
  absl::StatusOr<Trace> again = ParseTraceJson(t->ToJson());
  REQUIRE(again.ok());
  CHECK(again->ToJson() == t->ToJson());
}

TEST_CASE("Bad traces name the job and the field") {
  const std::string head = R"({"jobs": [{"id": "ok", "arrival_s": 0, "model": "resnet50",
      "workers": 2, "iterations": 5}, )";
  struct Case {
    std::string job;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {R"({"id": "b", "arrival_s": 1, "model": "alexnet", "workers": 2, "iterations": 5})",
       {"jobs[1] (id 'b')", "model", "unknown model 'alexnet'"}},
      {R"({"id": "b", "arrival_s": 1, "model": "vgg16", "workers": 128, "iterations": 5})",
       {"jobs[1] (id 'b')", "workers", "128 GPUs requested but the cluster has 64"}},
      {R"({"id": "b", "arrival_s": -1, "model": "vgg16", "workers": 2, "iterations": 5})",
       {"t.json", "jobs[1] (id 'b')", "arrival_s", "-1"}},
      {R"({"id": "b", "arrival_s": 1, "model": "vgg16", "workers": 0, "iterations": 5})",
       {"jobs[1] (id 'b')", "workers", ">= 1"}},
      {R"({"id": "b", "arrival_s": 1, "model": "vgg16", "workers": 2.5, "iterations": 5})",
       {"jobs[1] (id 'b')", "workers", "integer"}},
      {R"({"id": "b", "arrival_s": 1, "model": "vgg16", "workers": 2, "iterations": 0})",
       {"jobs[1] (id 'b')", "iterations"}},
      {R"({"id": "b", "model": "vgg16", "workers": 2, "iterations": 3})",
       {"jobs[1] (id 'b')", "arrival_s", "missing"}},
      {R"({"id": "b", "arrival_s": "soon", "model": "vgg16", "workers": 2, "iterations": 3})",
       {"jobs[1] (id 'b')", "arrival_s", "number"}},
      {R"({"id": "ok", "arrival_s": 1, "model": "vgg16", "workers": 2, "iterations": 3})",
       {"jobs[1] (id 'ok')", "id", "duplicate"}},
      {R"({"id": "b", "arrival_s": 1, "model": "vgg16", "workers": 2, "iterations": 3,
           "planner": "magic"})",
       {"jobs[1] (id 'b')", "planner", "unknown planner 'magic'"}},
      {R"({"id": 7, "arrival_s": 1, "model": "vgg16", "workers": 2, "iterations": 3})",
       {"jobs[1]", "id", "string"}},
  };
  for (const Case& c : cases) {
    absl::Status s = Check(head + c.job + "]}");
    INFO(c.job);
    REQUIRE(!s.ok());
    for (const std::string& want : c.want) {
      INFO("message: " << ErrorOf(s));
      CHECK(ErrorOf(s).find(want) != std::string::npos);
    }
  }
  CHECK(ErrorOf(Check("{\"jobs\": [")).find("not valid JSON") != std::string::npos);
  CHECK(ErrorOf(Check("{\"tasks\": []}")).find("jobs") != std::string::npos);
  CHECK(!LoadTraceJson("/nonexistent/trace.json").ok());
}

TEST_CASE("The generator is deterministic for a seed and follows its mix") {
  TraceGenOptions o;
  o.jobs = 50;
  o.seed = 42;
  absl::StatusOr<Trace> a = GenerateTrace(o), b = GenerateTrace(o);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->ToJson() == b->ToJson());
  o.seed = 43;
  CHECK(GenerateTrace(o)->ToJson() != a->ToJson());
  CHECK(a->jobs[0].arrival_s == 0);
  for (size_t i = 1; i < a->jobs.size(); ++i) {
    CHECK(a->jobs[i].arrival_s >= a->jobs[i - 1].arrival_s);
  }
  CHECK(ValidateTrace(*a, 64, BuiltinModelNames(), PlannerNames()).ok());

  o.jobs = 20000;
  absl::StatusOr<Trace> big = GenerateTrace(o);
  REQUIRE(big.ok());
  std::map<int, int> count;
  double gaps = 0;
  for (const TraceJob& j : big->jobs) {
    count[j.workers] += 1;
    CHECK(j.iterations >= o.min_iterations);
    CHECK(j.iterations <= o.max_iterations);
  }
  gaps = big->jobs.back().arrival_s / (o.jobs - 1);
  CHECK(gaps == Approx(o.mean_interarrival_s).epsilon(0.03));
  for (size_t k = 0; k < o.worker_counts.size(); ++k) {
    const double share = 100.0 * count[o.worker_counts[k]] / o.jobs;
    INFO(o.worker_counts[k] << " GPUs: " << share << "%");
    CHECK(share == Approx(o.worker_weights[k]).margin(1.0));
  }
}

TEST_CASE("Generator options are checked") {
  TraceGenOptions o;
  o.jobs = 0;
  CHECK(ErrorOf(GenerateTrace(o).status()).find("jobs") != std::string::npos);
  o = TraceGenOptions();
  o.worker_weights.pop_back();
  CHECK(ErrorOf(GenerateTrace(o).status()).find("worker_weights") != std::string::npos);
  o = TraceGenOptions();
  o.min_iterations = 10;
  o.max_iterations = 5;
  CHECK(ErrorOf(GenerateTrace(o).status()).find("iterations") != std::string::npos);
}

}  // namespace
}  // namespace overlap::sched::cluster
