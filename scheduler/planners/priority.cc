// ByteScheduler and US-Byte: priority-and-credit scheduling of tensor partitions (planner.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "scheduler/planner.h"
#include "scheduler/planners/common.h"

namespace overlap::sched {
namespace {

using internal::Piece;

// Builds a layerwise-update plan from pieces sent by priority (forward position) and credit.
Plan PriorityPlan(const char* name, const Profile& profile, const CostModel& cost,
                  const std::vector<Piece>& pieces, int64_t credit_bytes) {
  std::vector<Bucket> buckets;
  std::vector<double> priority;
  for (const Piece& p : pieces) {
    Bucket b = internal::MakeBucket(profile, {p}, Collective::kAllreduce, 0, Window::kBackward);
    buckets.push_back(std::move(b));
    // Forward position first, then offset within the tensor: front bytes are needed first.
    priority.push_back(profile.tensors[p.tensor].first_use_ms * 1e6 + p.tensor +
                       static_cast<double>(p.offset) / (profile.tensors[p.tensor].count() + 1));
  }
  Plan plan = internal::NewPlan(name, profile, 0);
  plan.layerwise_update = true;
  for (size_t i : internal::PriorityOrder(profile, cost, buckets, priority, credit_bytes)) {
    plan.buckets.push_back(std::move(buckets[i]));
  }
  // Buckets that finish after backward are, by intent, overlapping the next forward.
  double t = 0;
  for (Bucket& b : plan.buckets) {
    double ready = 0;
    for (const TensorSlice& s : b.slices) {
      ready = std::max(ready, profile.tensors[s.tensor].ready_ms);
    }
    t = std::max(t, ready) + cost.Ms(0, b.op, static_cast<double>(b.bytes));
    if (t > profile.backward_ms) {
      b.window = Window::kNextForward;
    }
  }
  return plan;
}

std::vector<Piece> EqualPartitions(const Profile& profile, int64_t partition_bytes) {
  std::vector<Piece> pieces;
  for (int t : internal::ReadyOrder(profile)) {
    for (const Piece& p : internal::CutTensor(profile, t, partition_bytes)) {
      pieces.push_back(p);
    }
  }
  return pieces;
}

// Block k in priority order (front layers first) gets min(p0 x growth^k, cap) bytes.
std::vector<Piece> GrowingPartitions(const Profile& profile, double p0, double growth) {
  constexpr double kCap = 64e6;
  std::vector<int> by_priority(profile.tensors.size());
  for (size_t i = 0; i < by_priority.size(); ++i) {
    by_priority[i] = static_cast<int>(i);
  }
  std::stable_sort(by_priority.begin(), by_priority.end(), [&](int a, int b) {
    return profile.tensors[a].first_use_ms < profile.tensors[b].first_use_ms;
  });
  std::vector<Piece> pieces;
  double size = p0;
  for (int t : by_priority) {
    const TensorInfo& tensor = profile.tensors[t];
    const int64_t elem = static_cast<int64_t>(DataTypeSize(tensor.dtype));
    int64_t off = 0;
    while (off < tensor.count()) {
      const int64_t n =
          std::min(tensor.count() - off, std::max<int64_t>(1, static_cast<int64_t>(size) / elem));
      pieces.push_back({t, off, n, n * elem});
      off += n;
      size = std::min(kCap, size * growth);
    }
  }
  return pieces;
}

}  // namespace

absl::StatusOr<Plan> PlanByteScheduler(const Profile& profile, const CostModel& cost,
                                       const PlannerOptions& options) {
  std::vector<int64_t> partitions = {500'000, 2'000'000, 8'000'000, 32'000'000};
  std::vector<int64_t> credits = {1, 4};  // in partitions
  if (options.partition_bytes > 0) {
    partitions = {options.partition_bytes};
  }
  Plan best;
  double best_ms = std::numeric_limits<double>::infinity();
  for (int64_t p : partitions) {
    const std::vector<Piece> pieces = EqualPartitions(profile, p);
    std::vector<int64_t> credit_list;
    if (options.credit_bytes > 0) {
      credit_list = {options.credit_bytes};
    } else {
      for (int64_t c : credits) {
        credit_list.push_back(c * p);
      }
    }
    for (int64_t credit : credit_list) {
      Plan plan = PriorityPlan("bytescheduler", profile, cost, pieces, credit);
      const double ms = internal::SimulatedMs(profile, plan, cost);
      if (ms < best_ms) {
        best_ms = ms;
        best = std::move(plan);
      }
    }
  }
  if (!std::isfinite(best_ms)) {
    return absl::InternalError("bytescheduler: no candidate simulated");
  }
  return best;
}

absl::StatusOr<Plan> PlanUsByte(const Profile& profile, const CostModel& cost,
                                const PlannerOptions&) {
  Plan best;
  double best_ms = std::numeric_limits<double>::infinity();
  for (double p0 : {250e3, 1e6, 4e6}) {
    for (double growth : {1.1, 1.3, 1.6}) {
      const std::vector<Piece> pieces = GrowingPartitions(profile, p0, growth);
      // Credit of one block: the next block is chosen only when the channel is idle.
      Plan plan = PriorityPlan("usbyte", profile, cost, pieces, 1);
      const double ms = internal::SimulatedMs(profile, plan, cost);
      if (ms < best_ms) {
        best_ms = ms;
        best = std::move(plan);
      }
    }
  }
  if (!std::isfinite(best_ms)) {
    return absl::InternalError("usbyte: no candidate simulated");
  }
  return best;
}

}  // namespace overlap::sched
