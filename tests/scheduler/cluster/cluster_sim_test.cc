#include "scheduler/cluster/cluster_sim.h"

#include <catch2/catch.hpp>
#include <map>

#include "scheduler/builtin.h"
#include "scheduler/cluster/trace_gen.h"
#include "scheduler/simulator.h"

namespace overlap::sched::cluster {
namespace {

TraceJob Job(const std::string& id, double arrival, int workers, int64_t iterations) {
  TraceJob j;
  j.id = id;
  j.arrival_s = arrival;
  j.model = "toy";
  j.workers = workers;
  j.iterations = iterations;
  return j;
}

IterationModel Model(double compute_ms, double iteration_ms, double release_ms, double comm_ms,
                     double tail_ms) {
  return IterationModel{compute_ms, iteration_ms, release_ms, comm_ms, tail_ms};
}

// Fixed iteration models by job id, whatever the placement.
IterationModelFn Fixed(const std::map<std::string, IterationModel>& models) {
  return [models](const TraceJob& job, bool) -> absl::StatusOr<IterationModel> {
    return models.at(job.id);
  };
}

ClusterSimOptions Options(const char* placement, const char* comm) {
  ClusterSimOptions o;
  o.placement = *ParsePlacement(placement);
  o.communication = *ParseCommPolicy(comm);
  return o;
}

ClusterSpec Spec(int servers, int gpus_per_server, double eta, double link_utilization = 1.0) {
  ClusterSpec s;
  s.servers = servers;
  s.gpus_per_server = gpus_per_server;
  s.contention.eta = eta;
  s.contention.link_utilization = link_utilization;
  return s;
}

std::map<std::string, double> Jcts(const ClusterResult& r) {
  std::map<std::string, double> out;
  for (const JobResult& j : r.jobs) {
    out[j.id] = j.jct_s;
  }
  return out;
}

// Every job's iteration from `cache`, planned by `planner`.
IterationModelFn PlannedBy(IterationModelCache& cache, const std::string& planner) {
  return [&cache, planner](const TraceJob& job, bool spans) {
    return cache.Get(job.model, planner, job.workers, spans);
  };
}

TEST_CASE("One job alone: iterations of compute, release, transfer and tail") {
  // 2 servers x 1 GPU; the job spans both. Compute 1 s, transfer released 0.5 s into it and
  // taking 1 s, then 0.2 s before the next iteration: 1.7 s per iteration. Three iterations
  // start at 0, 1.7, 3.4; the last transfer ends at 3.4 + 1.5 = 4.9.
  Trace t;
  t.jobs = {Job("a", 0, 2, 3)};
  auto fn = Fixed({{"a", Model(1000, 1700, 500, 1000, 200)}});
  for (const char* comm : {"srsf1", "srsf2", "adadual", "ada-srsf"}) {
    absl::StatusOr<ClusterResult> r =
        SimulateCluster(t, Spec(2, 1, 0.5), Options("first-fit", comm), fn);
    REQUIRE(r.ok());
    CHECK(r->jobs[0].jct_s == Approx(4.9));
    CHECK(r->jobs[0].servers == 2);
    CHECK(r->makespan_s == Approx(4.9));
    // Two GPUs busy 3 s each out of 2 x 4.9.
    CHECK(r->gpu_util == Approx(6.0 / 9.8));
    CHECK(r->transfers == 3);
    CHECK(r->shared_transfers == 0);
  }
}

TEST_CASE("A negative tail lets the next compute overlap the end of the transfer") {
  // Compute 1 s, transfer 1 s released at 0.5 s, tail -0.5 s: the next compute may start when
  // 0.5 s of transfer are left, i.e. at 1 s. Iterations start at 0, 1, 2; transfers run
  // [0.5, 1.5], [1.5, 2.5], [2.5, 3.5].
  Trace t;
  t.jobs = {Job("a", 0, 2, 3)};
  auto fn = Fixed({{"a", Model(1000, 1000, 500, 1000, -500)}});
  absl::StatusOr<ClusterResult> r =
      SimulateCluster(t, Spec(2, 1, 0.5), Options("first-fit", "srsf1"), fn);
  REQUIRE(r.ok());
  CHECK(r->jobs[0].jct_s == Approx(3.5));
}

// Two communication-only jobs (no compute) sharing both NICs of a 2 x 1 cluster: the transfer
// arithmetic of contention.h with eta = 0.5 (two-way: each at 1/3).
TEST_CASE("Two jobs on one link, by hand, for every policy") {
  Trace t;
  t.jobs = {Job("long", 0, 2, 1), Job("short", 1, 2, 1)};
  SECTION("a 1 s transfer arriving while 2 s of a 3 s one remain") {
    auto fn = Fixed({{"long", Model(0, 3000, 0, 3000, 0)}, {"short", Model(0, 1000, 0, 1000, 0)}});
    // Waiting: long ends at 3, short runs [3, 4]: JCTs 3 and 3. Sharing: short ends at 1 + 3 =
    // 4, long has 1 s left and ends at 5: JCTs 5 and 3. AdaDUAL: 1 x (2c - 2) = 4 > 2: waits.
    const std::map<std::string, std::map<std::string, double>> want = {
        {"srsf1", {{"long", 3}, {"short", 3}}},
        {"srsf2", {{"long", 5}, {"short", 3}}},
        {"adadual", {{"long", 3}, {"short", 3}}},
        {"ada-srsf", {{"long", 3}, {"short", 3}}}};
    for (const auto& [comm, jcts] : want) {
      absl::StatusOr<ClusterResult> r =
          SimulateCluster(t, Spec(2, 1, 0.5), Options("first-fit", comm.c_str()), fn);
      REQUIRE(r.ok());
      INFO(comm);
      CHECK(Jcts(*r)["long"] == Approx(jcts.at("long")));
      CHECK(Jcts(*r)["short"] == Approx(jcts.at("short")));
    }
  }
  SECTION("a 0.25 s transfer arriving while 2 s of a 3 s one remain") {
    auto fn = Fixed({{"long", Model(0, 3000, 0, 3000, 0)}, {"short", Model(0, 250, 0, 250, 0)}});
    // Waiting: long ends at 3, short at 3.25 (JCT 2.25). Sharing: short ends at 1 + 0.75
    // (JCT 0.75), long has 1.75 s left and ends at 3.5. AdaDUAL: 0.25 x 4 = 1 < 2: shares.
    const std::map<std::string, std::map<std::string, double>> want = {
        {"srsf1", {{"long", 3}, {"short", 2.25}}},
        {"srsf2", {{"long", 3.5}, {"short", 0.75}}},
        {"adadual", {{"long", 3.5}, {"short", 0.75}}},
        {"ada-srsf", {{"long", 3.5}, {"short", 0.75}}}};
    for (const auto& [comm, jcts] : want) {
      absl::StatusOr<ClusterResult> r =
          SimulateCluster(t, Spec(2, 1, 0.5), Options("first-fit", comm.c_str()), fn);
      REQUIRE(r.ok());
      INFO(comm);
      CHECK(Jcts(*r)["long"] == Approx(jcts.at("long")));
      CHECK(Jcts(*r)["short"] == Approx(jcts.at("short")));
      CHECK(r->shared_transfers == (comm == "srsf1" ? 0 : 1));
    }
  }
}

// The same two comm-only jobs when one transfer alone keeps only part of the link busy
// (link utilization u < 1): Slowdown(2) = max(1, 2u)(1 + eta) is below 2, and AdaDUAL's rule
// changes with it.
TEST_CASE("Two jobs on one link with link utilization below 1, by hand, for every policy") {
  Trace t;
  t.jobs = {Job("long", 0, 2, 1), Job("short", 1, 2, 1)};
  auto check = [&](double eta, double u, const IterationModelFn& fn,
                   const std::map<std::string, std::map<std::string, double>>& want) {
    for (const auto& [comm, jcts] : want) {
      absl::StatusOr<ClusterResult> r =
          SimulateCluster(t, Spec(2, 1, eta, u), Options("first-fit", comm.c_str()), fn);
      REQUIRE(r.ok());
      INFO(comm);
      CHECK(Jcts(*r)["long"] == Approx(jcts.at("long")));
      CHECK(Jcts(*r)["short"] == Approx(jcts.at("short")));
    }
  };
  SECTION("u = 0.6, eta = 0: a 1 s transfer while 2 s of a 3 s one remain now shares") {
    // c = 1.2 < 3/2: sharing always lowers the pair's sum. Sharing: short ends at 1 + 1.2 = 2.2
    // (JCT 1.2); long did 1 of its 2 left and ends at 3.2. Waiting: 3 and 3 (sum 6 > 4.4).
    // With u = 1 and eta = 0.5 the same pair waits (previous test).
    auto fn = Fixed({{"long", Model(0, 3000, 0, 3000, 0)}, {"short", Model(0, 1000, 0, 1000, 0)}});
    check(0, 0.6, fn,
          {{"srsf1", {{"long", 3}, {"short", 3}}},
           {"srsf2", {{"long", 3.2}, {"short", 1.2}}},
           {"adadual", {{"long", 3.2}, {"short", 1.2}}},
           {"ada-srsf", {{"long", 3.2}, {"short", 1.2}}}});
  }
  SECTION("u = 0.75, eta = 0.5: the same pair waits, a 0.5 s transfer shares") {
    // c = 1.5 x 1.5 = 2.25, threshold 2c - 2 = 2.5. A 1 s newcomer: 2.5 > 2, AdaDUAL waits;
    // SRSF(2) shares: short ends at 1 + 2.25 (JCT 2.25), long has 1 s left and ends at 4.25.
    auto fn = Fixed({{"long", Model(0, 3000, 0, 3000, 0)}, {"short", Model(0, 1000, 0, 1000, 0)}});
    check(0.5, 0.75, fn,
          {{"srsf1", {{"long", 3}, {"short", 3}}},
           {"srsf2", {{"long", 4.25}, {"short", 2.25}}},
           {"adadual", {{"long", 3}, {"short", 3}}},
           {"ada-srsf", {{"long", 3}, {"short", 3}}}});
    // A 0.5 s newcomer: 0.5 x 2.5 < 2, shares: it ends at 1 + 1.125 (JCT 1.125); long did 0.5
    // of its 2 left and ends at 2.125 + 1.5 = 3.625. Waiting: 3 and 2.5.
    auto half = Fixed({{"long", Model(0, 3000, 0, 3000, 0)}, {"short", Model(0, 500, 0, 500, 0)}});
    check(0.5, 0.75, half,
          {{"srsf1", {{"long", 3}, {"short", 2.5}}},
           {"srsf2", {{"long", 3.625}, {"short", 1.125}}},
           {"adadual", {{"long", 3.625}, {"short", 1.125}}},
           {"ada-srsf", {{"long", 3.625}, {"short", 1.125}}}});
  }
  SECTION("u = 0.5, eta = 0: two transfers fit in the link and neither slows") {
    // c = 1: sharing is free. A 4 s newcomer (longer than the 2 s left) still shares: long ends
    // at 3, the newcomer at 5 (JCT 4). Waiting: long at 3, the newcomer at 7 (JCT 6).
    auto fn = Fixed({{"long", Model(0, 3000, 0, 3000, 0)}, {"short", Model(0, 4000, 0, 4000, 0)}});
    check(0, 0.5, fn,
          {{"srsf1", {{"long", 3}, {"short", 6}}},
           {"srsf2", {{"long", 3}, {"short", 4}}},
           {"adadual", {{"long", 3}, {"short", 4}}},
           {"ada-srsf", {{"long", 3}, {"short", 4}}}});
  }
}

TEST_CASE("Waiting transfers are served shortest-remaining-service first or in arrival order") {
  // Three comm-only jobs on the same link, eta 0.2 (2c - 2 = 2.8). "a" runs 0..2; "b" (4 s) and
  // "c" (1.5 s) arrive at 0.5 and 1 and wait (srsf1; AdaDUAL too: 4 x 2.8 > 1.5 and
  // 1.5 x 2.8 > 1 left of "a", and later 1.5 x 2.8 > 4 left of "b"). SRSF serves c first:
  // c [2, 3.5], b [3.5, 7.5]; FIFO (adadual) serves b first: b [2, 6], c [6, 7.5].
  Trace t;
  t.jobs = {Job("a", 0, 2, 1), Job("b", 0.5, 2, 1), Job("c", 1, 2, 1)};
  auto fn = Fixed({{"a", Model(0, 2000, 0, 2000, 0)},
                   {"b", Model(0, 4000, 0, 4000, 0)},
                   {"c", Model(0, 1500, 0, 1500, 0)}});
  absl::StatusOr<ClusterResult> srsf =
      SimulateCluster(t, Spec(2, 1, 0.2), Options("first-fit", "srsf1"), fn);
  REQUIRE(srsf.ok());
  CHECK(Jcts(*srsf)["b"] == Approx(7.0));
  CHECK(Jcts(*srsf)["c"] == Approx(2.5));
  absl::StatusOr<ClusterResult> fifo =
      SimulateCluster(t, Spec(2, 1, 0.2), Options("first-fit", "adadual"), fn);
  REQUIRE(fifo.ok());
  CHECK(Jcts(*fifo)["b"] == Approx(5.5));
  CHECK(Jcts(*fifo)["c"] == Approx(6.5));
  CHECK(fifo->shared_transfers == 0);
}

TEST_CASE("A shared GPU runs the job with the least remaining service first") {
  // One GPU. "long": 10 iterations of 1 s from 0; "short": 2 iterations from 0.5. SRSF: long
  // [0, 1], short [1, 3], long [3, 12]. FIFO (adadual): long [0, 10], short [10, 12].
  Trace t;
  t.jobs = {Job("long", 0, 1, 10), Job("short", 0.5, 1, 2)};
  auto fn = Fixed({{"long", Model(1000, 1000, 0, 0, 0)}, {"short", Model(1000, 1000, 0, 0, 0)}});
  absl::StatusOr<ClusterResult> srsf =
      SimulateCluster(t, Spec(1, 1, 0.2), Options("first-fit", "ada-srsf"), fn);
  REQUIRE(srsf.ok());
  CHECK(Jcts(*srsf)["long"] == Approx(12));
  CHECK(Jcts(*srsf)["short"] == Approx(2.5));
  CHECK(srsf->avg_jct_s == Approx(7.25));
  CHECK(srsf->median_jct_s == Approx(7.25));
  CHECK(srsf->p95_jct_s == Approx(12));
  CHECK(srsf->gpu_util == Approx(1.0));
  absl::StatusOr<ClusterResult> fifo =
      SimulateCluster(t, Spec(1, 1, 0.2), Options("first-fit", "adadual"), fn);
  REQUIRE(fifo.ok());
  CHECK(Jcts(*fifo)["long"] == Approx(10));
  CHECK(Jcts(*fifo)["short"] == Approx(11.5));
}

TEST_CASE("Placement decides whether a job crosses the network") {
  // 2 servers x 2 GPUs; "x" (1 GPU, long) arrives first. first-fit then gives "y" (2 GPUs) the
  // two least crowded GPUs in index order, 1 and 2: two servers, NIC traffic. lwf-2 keeps "y"
  // on server 1, on its internal link.
  Trace t;
  t.jobs = {Job("x", 0, 1, 100), Job("y", 1, 2, 1)};
  auto fn = [](const TraceJob& job, bool spans) -> absl::StatusOr<IterationModel> {
    if (job.id == "x") {
      return Model(1000, 1000, 0, 0, 0);
    }
    return spans ? Model(100, 1100, 0, 1000, 0) : Model(100, 200, 0, 100, 0);
  };
  absl::StatusOr<ClusterResult> ff =
      SimulateCluster(t, Spec(2, 2, 0.2), Options("first-fit", "srsf1"), fn);
  REQUIRE(ff.ok());
  CHECK(ff->jobs[1].gpus == std::vector<int>({1, 2}));
  CHECK(ff->jobs[1].servers == 2);
  CHECK(ff->jobs[1].jct_s == Approx(1.0));  // one iteration: its 1 s transfer
  absl::StatusOr<ClusterResult> lwf =
      SimulateCluster(t, Spec(2, 2, 0.2), Options("lwf-2", "srsf1"), fn);
  REQUIRE(lwf.ok());
  CHECK(lwf->jobs[1].gpus == std::vector<int>({2, 3}));
  CHECK(lwf->jobs[1].servers == 1);
  CHECK(lwf->jobs[1].jct_s == Approx(0.1));
}

TEST_CASE("Bad jobs and bad models are named") {
  Trace t;
  t.jobs = {Job("a", 0, 8, 1)};
  auto fn = Fixed({{"a", Model(1, 1, 0, 0, 0)}});
  absl::StatusOr<ClusterResult> r =
      SimulateCluster(t, Spec(2, 2, 0.2), Options("first-fit", "srsf1"), fn);
  REQUIRE(!r.ok());
  CHECK(std::string(r.status().message()).find("id 'a'") != std::string::npos);
  CHECK(std::string(r.status().message()).find("workers") != std::string::npos);
  t.jobs = {Job("a", 0, 2, 1)};
  auto failing = [](const TraceJob&, bool) -> absl::StatusOr<IterationModel> {
    return absl::NotFoundError("no such model");
  };
  r = SimulateCluster(t, Spec(2, 2, 0.2), Options("first-fit", "srsf1"), failing);
  REQUIRE(!r.ok());
  CHECK(std::string(r.status().message()).find("job 'a'") != std::string::npos);
}

// The iteration model fitted from a real plan reproduces overlap's simulator at solo speed and
// at twice the communication time.
TEST_CASE("FitIterationModel matches sched::Simulate at 1x and 2x") {
  ClusterSpec spec;
  for (const char* model : {"resnet50", "vgg16"}) {
    for (const char* planner : {"fusion", "mgwfbp", "deft"}) {
      Profile profile = *LoadBuiltinProfile(model);
      PlannerOptions options;
      options.staleness = 1;
      const CostModel cost = spec.JobCost(8, true);
      absl::StatusOr<IterationModel> m = FitIterationModel(profile, planner, cost, options);
      REQUIRE(m.ok());
      absl::StatusOr<Plan> plan = MakePlan(planner, profile, cost, options);
      REQUIRE(plan.ok());
      CostModel slow = cost;
      slow.channels[0].latency_s *= 2;
      slow.channels[0].bandwidth_bytes_per_s /= 2;
      const double t1 = Simulate(profile, *plan, cost)->iteration_ms;
      const double t2 = Simulate(profile, *plan, slow)->iteration_ms;
      INFO(model << " " << planner);
      CHECK(m->iteration_ms == Approx(t1));
      CHECK(m->compute_ms == Approx(profile.compute_ms()));
      auto predicted = [&](double f) {
        return std::max(m->iteration_ms, m->release_ms + f * m->comm_ms + m->tail_ms);
      };
      CHECK(predicted(1) == Approx(t1));
      CHECK(predicted(2) == Approx(t2));
    }
  }
}

TEST_CASE("A job alone on the cluster runs at its planned iteration time") {
  ClusterSpec spec;
  IterationModelCache cache(spec, PlannerOptions());
  Trace t;
  TraceJob j = Job("solo", 0, 8, 20);
  j.model = "resnet50";
  t.jobs = {j};
  IterationModelFn fn = PlannedBy(cache, "mgwfbp");
  for (const char* placement : {"first-fit", "lwf-1"}) {
    absl::StatusOr<ClusterResult> r = SimulateCluster(t, spec, Options(placement, "srsf1"), fn);
    REQUIRE(r.ok());
    const IterationModel m = *cache.Get("resnet50", "mgwfbp", 8, r->jobs[0].servers > 1);
    // 19 whole iterations, then the last one up to its transfer's end (no tail after it).
    const double want = (19 * m.iteration_ms + m.release_ms + m.comm_ms) / 1e3;
    INFO(placement);
    CHECK(r->jobs[0].jct_s == Approx(std::max(want, (19 * m.iteration_ms + m.compute_ms) / 1e3)));
  }
}

TEST_CASE("The same seed gives identical results") {
  TraceGenOptions g;
  g.jobs = 24;
  g.seed = 5;
  g.min_iterations = 20;
  g.max_iterations = 60;
  ClusterSpec spec;
  auto run = [&]() {
    Trace t = *GenerateTrace(g);
    IterationModelCache cache(spec, PlannerOptions());
    IterationModelFn fn = PlannedBy(cache, "fusion");
    return *SimulateCluster(t, spec, Options("lwf-2", "ada-srsf"), fn);
  };
  ClusterResult a = run(), b = run();
  REQUIRE(a.jobs.size() == b.jobs.size());
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    CHECK(a.jobs[i].jct_s == b.jobs[i].jct_s);
    CHECK(a.jobs[i].gpus == b.jobs[i].gpus);
  }
  CHECK(a.avg_jct_s == b.avg_jct_s);
  CHECK(a.makespan_s == b.makespan_s);
  CHECK(a.shared_transfers == b.shared_transfers);
}

TEST_CASE("Every policy keeps to its admission rule on a generated trace") {
  TraceGenOptions g;
  g.jobs = 30;
  g.seed = 9;
  g.min_iterations = 20;
  g.max_iterations = 40;
  g.mean_interarrival_s = 1;
  Trace t = *GenerateTrace(g);
  ClusterSpec spec;
  IterationModelCache cache(spec, PlannerOptions());
  IterationModelFn fn = PlannedBy(cache, "mgwfbp");
  const std::map<std::string, int> cap = {
      {"srsf1", 1}, {"srsf2", 2}, {"adadual", 2}, {"ada-srsf", 2}};
  for (const auto& [comm, most] : cap) {
    absl::StatusOr<ClusterResult> r =
        SimulateCluster(t, spec, Options("first-fit", comm.c_str()), fn);
    REQUIRE(r.ok());
    INFO(comm);
    CHECK(r->max_nic_sharing <= most);
    CHECK(r->transfers > 0);
    CHECK((r->shared_transfers > 0) == (comm != "srsf1"));
    // No job beats running alone (up to its last iteration's tail, under 2 s here).
    for (const JobResult& j : r->jobs) {
      CHECK(j.jct_s >= j.solo_s - 2.0);
    }
  }
}

TEST_CASE("The timeline has a track per GPU and per NIC") {
  Trace t;
  t.jobs = {Job("a", 0, 2, 2)};
  ClusterSimOptions o = Options("first-fit", "srsf1");
  o.record_timeline = true;
  absl::StatusOr<ClusterResult> r =
      SimulateCluster(t, Spec(2, 1, 0.5), o, Fixed({{"a", Model(1000, 1700, 500, 1000, 200)}}));
  REQUIRE(r.ok());
  const std::string& json = r->timeline_json;
  CHECK(json.find("\"GPU 1 (server 1)\"") != std::string::npos);
  CHECK(json.find("\"NIC of server 1\"") != std::string::npos);
  // Two compute spans on each of 2 GPUs, two transfers on each of 2 NICs.
  size_t spans = 0;
  for (size_t at = json.find("\"ph\":\"X\""); at != std::string::npos;
       at = json.find("\"ph\":\"X\"", at + 1)) {
    ++spans;
  }
  CHECK(spans == 8);
}

}  // namespace
}  // namespace overlap::sched::cluster
