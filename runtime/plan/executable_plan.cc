#include "runtime/plan/executable_plan.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/scaling.h"
#include "runtime/planes/compression_stage.h"
#include "runtime/planes/delay_line.h"

namespace overlap {
namespace {

absl::Status BadBucket(size_t b, const std::string& cause) {
  return absl::InvalidArgumentError(absl::StrCat("plan bucket ", b, ": ", cause));
}

// Two buckets carry the same slices (a reduce-scatter and its allgather).
bool SameSlices(const std::vector<ExecSlice>& a, const std::vector<ExecSlice>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].entry != b[i].entry || a[i].offset != b[i].offset || a[i].count != b[i].count) {
      return false;
    }
  }
  return true;
}

// A compressed bucket's residual key: its slices, which every rank holds alike.
std::string CompressionKey(const ExecBucket& bucket, const std::vector<PlanEntry>& entries) {
  std::string key = "overlap plan bucket";
  for (const ExecSlice& s : bucket.slices) {
    absl::StrAppend(&key, " ", entries[static_cast<size_t>(s.entry)].response->name, "[", s.offset,
                    "+", s.count, "]");
  }
  return key;
}

// A bucket whose slices are on both the host and the GPU, split into one bucket per device (host
// slices first, then the CUDA ones, each keeping the plan's slice order; a process runs one GPU):
// a bucket runner packs for one device. A reduce-scatter and its all-gather hold the same slices,
// so they split alike.
std::vector<ExecBucket> SplitByDevice(ExecBucket bucket, const std::vector<PlanEntry>& entries) {
  auto kind_of = [&](const ExecSlice& s) {
    return entries[static_cast<size_t>(s.entry)].response->request.device;
  };
  std::vector<DeviceKind> kinds;
  for (const ExecSlice& s : bucket.slices) {
    if (std::find(kinds.begin(), kinds.end(), kind_of(s)) == kinds.end()) {
      kinds.push_back(kind_of(s));
    }
  }
  if (kinds.size() <= 1) return {std::move(bucket)};
  std::sort(kinds.begin(), kinds.end());
  std::vector<ExecBucket> parts;
  for (DeviceKind kind : kinds) {
    ExecBucket part = bucket;
    part.slices.clear();
    for (const ExecSlice& s : bucket.slices) {
      if (kind_of(s) == kind) part.slices.push_back(s);
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace

const char* BucketKindName(BucketKind kind) {
  switch (kind) {
    case BucketKind::kWhole:
      return "whole";
    case BucketKind::kAllreduce:
      return "allreduce";
    case BucketKind::kReduceScatter:
      return "reduce-scatter";
    case BucketKind::kAllgather:
      return "allgather";
  }
  return "?";
}

bool ExecutablePlan::delayed() const {
  return std::any_of(buckets.begin(), buckets.end(),
                     [](const ExecBucket& b) { return b.delayed(); });
}

void ExecutablePlan::Index() {
  buckets_of.assign(entries.size(), {});
  for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
    for (const ExecSlice& s : buckets[static_cast<size_t>(b)].slices) {
      std::vector<int>& of = buckets_of[static_cast<size_t>(s.entry)];
      if (of.empty() || of.back() != b) of.push_back(b);
    }
  }
}

ExecutablePlan ObservedPlan(std::vector<PlanEntry> entries,
                            const std::vector<std::vector<int>>& units) {
  ExecutablePlan plan;
  plan.source = "observed";
  for (const std::vector<int>& unit : units) {
    ExecBucket bucket;
    for (int e : unit) bucket.slices.push_back(ExecSlice{e, 0, 0});
    plan.buckets.push_back(std::move(bucket));
  }
  plan.entries = std::move(entries);
  plan.Index();
  return plan;
}

absl::StatusOr<ExecutablePlan> ScheduledPlan(
    const sched::Plan& plan, const absl::flat_hash_map<std::string, PlanEntry>& table,
    int num_channels) {
  ExecutablePlan out;
  out.source = plan.planner;
  out.scheduled = plan.Serialize();
  out.layerwise_update = plan.layerwise_update;
  absl::flat_hash_map<std::string, int> entry_of;
  // Per entry: element ranges covered by allreduces, reduce-scatters and allgathers.
  struct Coverage {
    std::vector<std::pair<int64_t, int64_t>> reduced, scattered, gathered;
  };
  std::vector<Coverage> coverage;
  if (plan.buckets.empty()) return absl::InvalidArgumentError("the plan has no buckets");
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const sched::Bucket& in = plan.buckets[b];
    if (in.delay < 0 || in.delay > kMaxUpdateDelay || in.period < 1 ||
        in.period > kMaxUpdatePeriod || in.phase < 0 || in.phase >= in.period) {
      return BadBucket(b, absl::StrCat("delay ", in.delay, ", period ", in.period, " and phase ",
                                       in.phase, " are out of range (delay 0..", kMaxUpdateDelay,
                                       ", period 1..", kMaxUpdatePeriod, ", 0 <= phase < period)"));
    }
    const bool delayed = in.delay != 0 || in.period != 1;
    if (delayed && in.op != sched::Collective::kAllreduce) {
      return BadBucket(
          b, absl::StrCat("a delay or an update period on a ", sched::CollectiveName(in.op),
                          " is not executable (only on allreduces)"));
    }
    if (in.compressor != "none" && in.op != sched::Collective::kAllreduce) {
      return BadBucket(
          b, absl::StrCat("compressor '", in.compressor, "' on a ", sched::CollectiveName(in.op),
                          " is not executable (only on allreduces)"));
    }
    if (in.channel < 0 || in.channel >= num_channels) {
      return BadBucket(
          b, absl::StrCat("channel ", in.channel, " does not exist (", num_channels, " channels)"));
    }
    if (in.slices.empty()) return BadBucket(b, "no slices");
    ExecBucket bucket;
    bucket.channel = in.channel;
    bucket.delay = in.delay;
    bucket.period = in.period;
    bucket.phase = in.phase;
    bucket.two_stage = in.two_stage && in.op == sched::Collective::kAllreduce;
    switch (in.op) {
      case sched::Collective::kAllreduce:
        bucket.kind = BucketKind::kAllreduce;
        break;
      case sched::Collective::kReduceScatter:
        bucket.kind = BucketKind::kReduceScatter;
        break;
      case sched::Collective::kAllgather:
        bucket.kind = BucketKind::kAllgather;
        break;
      default:
        return BadBucket(b, "unknown collective");
    }
    const Request* first = nullptr;
    for (const sched::TensorSlice& s : in.slices) {
      auto known = table.find(s.name);
      if (known == table.end()) {
        return BadBucket(
            b, absl::StrCat("tensor '", s.name, "' is not an allreduce this rank has agreed"));
      }
      const Request& request = known->second.response->request;
      if (request.kind != OpKind::kAllreduce || request.tensors.size() != 1) {
        return BadBucket(b, absl::StrCat("tensor '", s.name, "' is not a single-tensor allreduce"));
      }
      if (CompressionStage::CompressorName(request.compression) != in.compressor) {
        return BadBucket(b, absl::StrCat("tensor '", s.name, "' was agreed with compression '",
                                         request.compression, "', the bucket has compressor '",
                                         in.compressor, "'"));
      }
      const int64_t elements = request.tensors[0].NumElements();
      if (s.offset < 0 || s.count <= 0 || s.offset > elements - s.count) {
        // Not offset + count: on bytes from the wire or a file that sum may overflow.
        return BadBucket(
            b, absl::StrCat("slice of ", s.count, " elements at offset ", s.offset, " of tensor '",
                            s.name, "' is out of range (", elements, " elements)"));
      }
      const DataType dtype = request.tensors[0].dtype;
      if (delayed && (!DelayableDtype(dtype) || !DelayableOp(request.op))) {
        return BadBucket(b, absl::StrCat("tensor '", s.name, "' (", DataTypeName(dtype), ", ",
                                         ReduceOpName(request.op),
                                         ") cannot have a delay or an update period (needs "
                                         "float32 or float64 and a sum or an average)"));
      }
      if (delayed && !request.plan_may_delay) {
        return BadBucket(b, absl::StrCat("tensor '", s.name,
                                         "' cannot have a delay or an update period: it was not "
                                         "submitted as a gradient a plan may delay "
                                         "(AllreduceOptions::plan_may_delay), so the program "
                                         "reads its result in the same step"));
      }
      if (first == nullptr) {
        first = &request;
      } else if (request.tensors[0].dtype != first->tensors[0].dtype ||
                 CollectiveOp(request.op) != CollectiveOp(first->op)) {
        return BadBucket(b,
                         absl::StrCat("tensor '", s.name, "' has another dtype or reduction than '",
                                      first->name, "' in the same bucket"));
      } else if (request.compression != first->compression) {
        return BadBucket(
            b, absl::StrCat("tensor '", s.name, "' has compression '", request.compression, "', '",
                            first->name, "' has '", first->compression, "' in the same bucket"));
      }
      auto [it, added] = entry_of.emplace(s.name, static_cast<int>(out.entries.size()));
      if (added) {
        out.entries.push_back(known->second);
        coverage.emplace_back();
      }
      bucket.slices.push_back(ExecSlice{it->second, s.offset, s.count});
      Coverage& c = coverage[static_cast<size_t>(it->second)];
      auto& ranges = bucket.kind == BucketKind::kAllreduce       ? c.reduced
                     : bucket.kind == BucketKind::kReduceScatter ? c.scattered
                                                                 : c.gathered;
      ranges.emplace_back(s.offset, s.offset + s.count);
    }
    if (first != nullptr) bucket.compression = first->compression;
    for (ExecBucket& part : SplitByDevice(std::move(bucket), out.entries)) {
      if (part.compression != "none") part.compression_key = CompressionKey(part, out.entries);
      if (part.kind == BucketKind::kAllgather) {
        for (int r = static_cast<int>(out.buckets.size()) - 1; r >= 0; --r) {
          const ExecBucket& earlier = out.buckets[static_cast<size_t>(r)];
          if (earlier.kind == BucketKind::kReduceScatter &&
              SameSlices(earlier.slices, part.slices)) {
            part.reduce_scatter = r;
            break;
          }
        }
        if (part.reduce_scatter < 0) {
          return BadBucket(b, "allgather without an earlier reduce-scatter of the same slices");
        }
      }
      out.buckets.push_back(std::move(part));
    }
  }
  // Every element exactly once: by an allreduce, or by a reduce-scatter plus an allgather.
  for (size_t e = 0; e < out.entries.size(); ++e) {
    Coverage& c = coverage[e];
    const std::string& name = out.entries[e].response->name;
    const int64_t elements = out.entries[e].response->request.tensors[0].NumElements();
    std::sort(c.scattered.begin(), c.scattered.end());
    std::sort(c.gathered.begin(), c.gathered.end());
    if (c.scattered != c.gathered) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan: tensor '", name, "' is reduce-scattered and all-gathered over different slices"));
    }
    std::vector<std::pair<int64_t, int64_t>> all = c.reduced;
    all.insert(all.end(), c.scattered.begin(), c.scattered.end());
    std::sort(all.begin(), all.end());
    int64_t next = 0;
    for (const auto& [begin, end] : all) {
      if (begin != next) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan: tensor '", name, "': elements from ", std::min(begin, next),
                         " are ", begin > next ? "not covered" : "covered twice"));
      }
      next = end;
    }
    if (next != elements) {
      return absl::InvalidArgumentError(absl::StrCat("plan: tensor '", name, "': elements from ",
                                                     next, " to ", elements, " are not covered"));
    }
  }
  out.Index();
  return out;
}

}  // namespace overlap
