// ScheduledPlan (runtime/plan/executable_plan.h): which scheduler plans a rank accepts to run, and the
// schedules it carries into the planned executor. Pure logic: no MPI.
#include "runtime/plan/executable_plan.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "runtime/plan/plan_schedule.h"

namespace overlap {
namespace {

PlanEntry Entry(const std::string& name, int64_t elements, DataType dtype = DataType::kFloat32,
                ReduceOp op = ReduceOp::kAverage, bool plan_may_delay = true) {
  auto response = std::make_shared<Response>();
  response->name = name;
  response->request.name = name;
  response->request.kind = OpKind::kAllreduce;
  response->request.op = op;
  response->request.plan_may_delay = plan_may_delay;
  response->request.tensors.push_back(TensorMeta{dtype, {elements}});
  return PlanEntry{0, std::move(response)};
}

sched::Bucket Bucket(sched::Collective op, const std::string& name, int64_t offset, int64_t count,
                     int delay = 0, int period = 1, int phase = 0) {
  sched::Bucket b;
  b.op = op;
  b.slices.push_back(sched::TensorSlice{0, name, offset, count});
  b.delay = delay;
  b.period = period;
  b.phase = phase;
  return b;
}

absl::flat_hash_map<std::string, PlanEntry> Table() {
  absl::flat_hash_map<std::string, PlanEntry> table;
  table.emplace("w", Entry("w", 100));
  table.emplace("steps", Entry("steps", 10, DataType::kInt32, ReduceOp::kSum));
  table.emplace("metric", Entry("metric", 4, DataType::kFloat32, ReduceOp::kSum, false));
  return table;
}

TEST_CASE("a plan's delays and periods reach the executable plan per bucket") {
  sched::Plan plan;
  plan.planner = "deft";
  plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "w", 0, 60, 1, 2, 1));
  plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "w", 60, 40));
  absl::StatusOr<ExecutablePlan> out = ScheduledPlan(plan, Table(), 1);
  REQUIRE(out.ok());
  REQUIRE(out->delayed());
  REQUIRE(out->buckets[0].delay == 1);
  REQUIRE(out->buckets[0].period == 2);
  REQUIRE(out->buckets[0].phase == 1);
  REQUIRE_FALSE(out->buckets[1].delayed());
  REQUIRE(out->buckets_of[0] == std::vector<int>{0, 1});
}

TEST_CASE(
    "DelayedSlices lists each delayed tensor's slices in element order, synchronous ones too") {
  sched::Plan plan;
  plan.planner = "deft";
  plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "w", 60, 40));
  plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "w", 0, 60, 1, 2, 1));
  plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "steps", 0, 10));
  absl::StatusOr<ExecutablePlan> out = ScheduledPlan(plan, Table(), 1);
  REQUIRE(out.ok());
  const std::map<std::string, std::vector<ScheduledSlice>> slices = DelayedSlices(*out);
  REQUIRE(slices.size() == 1);  // "steps" runs synchronously: absent
  const std::vector<ScheduledSlice>& w = slices.at("w");
  REQUIRE(w.size() == 2);
  CHECK((w[0].offset == 0 && w[0].count == 60 && w[0].delay == 1 && w[0].period == 2 &&
         w[0].phase == 1));
  CHECK((w[1].offset == 60 && w[1].count == 40 && w[1].delay == 0 && w[1].period == 1));
}

TEST_CASE("a synchronous plan is not delayed") {
  sched::Plan plan;
  plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "w", 0, 100));
  plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "metric", 0, 4));
  absl::StatusOr<ExecutablePlan> out = ScheduledPlan(plan, Table(), 1);
  REQUIRE(out.ok());
  REQUIRE_FALSE(out->delayed());
}

TEST_CASE("schedules the runtime cannot run are refused naming the bucket") {
  sched::Plan plan;
  SECTION("a delay on a reduce-scatter") {
    plan.buckets.push_back(Bucket(sched::Collective::kReduceScatter, "w", 0, 100, 1));
    plan.buckets.push_back(Bucket(sched::Collective::kAllgather, "w", 0, 100));
    REQUIRE(ScheduledPlan(plan, Table(), 1).status().message() ==
            "plan bucket 0: a delay or an update period on a reduce_scatter is not executable "
            "(only on allreduces)");
  }
  SECTION("a period on an integer tensor") {
    plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "steps", 0, 10, 0, 2, 0));
    REQUIRE(ScheduledPlan(plan, Table(), 1).status().message() ==
            "plan bucket 0: tensor 'steps' (int32, sum) cannot have a delay or an update period "
            "(needs float32 or float64 and a sum or an average)");
  }
  SECTION("a delay on a tensor that is not a gradient a plan may delay") {
    plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "metric", 0, 4, 1));
    REQUIRE(ScheduledPlan(plan, Table(), 1).status().message() ==
            "plan bucket 0: tensor 'metric' cannot have a delay or an update period: it was not "
            "submitted as a gradient a plan may delay (AllreduceOptions::plan_may_delay), so the "
            "program reads its result in the same step");
  }
  SECTION("a period on a tensor that is not a gradient a plan may delay") {
    plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "metric", 0, 4, 0, 2, 0));
    REQUIRE_FALSE(ScheduledPlan(plan, Table(), 1).ok());
  }
  SECTION("a phase outside the period") {
    plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "w", 0, 100, 1, 2, 2));
    REQUIRE(ScheduledPlan(plan, Table(), 1).status().message() ==
            "plan bucket 0: delay 1, period 2 and phase 2 are out of range (delay 0..16, period "
            "1..64, 0 <= phase < period)");
  }
  SECTION("a delay beyond 16") {
    plan.buckets.push_back(Bucket(sched::Collective::kAllreduce, "w", 0, 100, 17));
    REQUIRE(ScheduledPlan(plan, Table(), 1).status().message() ==
            "plan bucket 0: delay 17, period 1 and phase 0 are out of range (delay 0..16, period "
            "1..64, 0 <= phase < period)");
  }
}

TEST_CASE("a bucket holding host and CUDA tensors runs as one bucket per device") {
  absl::flat_hash_map<std::string, PlanEntry> table = Table();
  PlanEntry gpu = Entry("g", 50);
  std::const_pointer_cast<Response>(gpu.response)->request.device = DeviceKind::kCuda;
  table.emplace("g", gpu);
  sched::Plan plan;
  // DeAR's halves over a bucket of both: the CUDA slice first in the plan.
  for (sched::Collective op : {sched::Collective::kReduceScatter, sched::Collective::kAllgather}) {
    sched::Bucket b = Bucket(op, "g", 0, 50);
    b.slices.push_back(sched::TensorSlice{0, "w", 0, 100});
    plan.buckets.push_back(b);
  }
  absl::StatusOr<ExecutablePlan> out = ScheduledPlan(plan, table, 1);
  REQUIRE(out.ok());
  REQUIRE(out->buckets.size() == 4);
  auto device_of = [&](const ExecBucket& b) {
    return out->entries[static_cast<size_t>(b.slices.front().entry)].response->request.device;
  };
  // Host part first, then the CUDA part; each all-gather pairs with its own device's half.
  REQUIRE(out->buckets[0].kind == BucketKind::kReduceScatter);
  REQUIRE(device_of(out->buckets[0]) == DeviceKind::kCpu);
  REQUIRE(device_of(out->buckets[1]) == DeviceKind::kCuda);
  REQUIRE(out->buckets[2].kind == BucketKind::kAllgather);
  REQUIRE(device_of(out->buckets[2]) == DeviceKind::kCpu);
  REQUIRE(out->buckets[2].reduce_scatter == 0);
  REQUIRE(device_of(out->buckets[3]) == DeviceKind::kCuda);
  REQUIRE(out->buckets[3].reduce_scatter == 1);
  for (const ExecBucket& b : out->buckets) REQUIRE(b.slices.size() == 1);

  SECTION("a delay and a period on a CUDA tensor are kept (its delay line is on the device)") {
    sched::Plan delayed;
    delayed.buckets.push_back(Bucket(sched::Collective::kAllreduce, "g", 0, 50, 1, 2, 1));
    delayed.buckets.push_back(Bucket(sched::Collective::kAllreduce, "w", 0, 100));
    absl::StatusOr<ExecutablePlan> kept = ScheduledPlan(delayed, table, 1);
    REQUIRE(kept.ok());
    REQUIRE(kept->buckets[0].delay == 1);
    REQUIRE(kept->buckets[0].period == 2);
  }
}

}  // namespace
}  // namespace overlap
