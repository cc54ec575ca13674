#include "runtime/negotiation/matcher.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap {
namespace {

std::string Describe(const Request& r) {
  return absl::StrCat(OpKindName(r.kind), " '", r.name, "'");
}

std::vector<int64_t> TrailingDims(const std::vector<int64_t>& shape) {
  return shape.empty() ? shape : std::vector<int64_t>(shape.begin() + 1, shape.end());
}

// The first way in which `other` (from rank `other_rank`) differs from `first` (from rank
// `first_rank`), or "" when they agree.
std::string Disagreement(const Request& first, int first_rank, const Request& other,
                         int other_rank) {
  auto both = [&](const std::string& a, const std::string& b) {
    return absl::StrCat("rank ", first_rank, " submitted ", a, ", rank ", other_rank, " submitted ",
                        b);
  };
  if (first.kind != other.kind) {
    return absl::StrCat("operation mismatch: ",
                        both(OpKindName(first.kind), OpKindName(other.kind)));
  }
  if (first.device != other.device) {
    const auto name = [](DeviceKind d) { return d == DeviceKind::kCuda ? "a CUDA tensor" : "a CPU tensor"; };
    return absl::StrCat("device mismatch: ", both(name(first.device), name(other.device)));
  }
  if (first.tensors.size() != other.tensors.size()) {
    return absl::StrCat("group size mismatch: ",
                        both(absl::StrCat(first.tensors.size(), " tensors"),
                             absl::StrCat(other.tensors.size(), " tensors")));
  }
  for (size_t i = 0; i < first.tensors.size(); ++i) {
    const TensorMeta& a = first.tensors[i];
    const TensorMeta& b = other.tensors[i];
    const std::string which = first.tensors.size() > 1 ? absl::StrCat(" (tensor ", i, ")") : "";
    if (a.dtype != b.dtype) {
      return absl::StrCat("dtype mismatch", which, ": ",
                          both(DataTypeName(a.dtype), DataTypeName(b.dtype)));
    }
    const bool ragged = first.kind == OpKind::kAllgather || first.kind == OpKind::kAlltoall;
    const bool shapes_agree =
        ragged ? a.shape.size() == b.shape.size() && TrailingDims(a.shape) == TrailingDims(b.shape)
               : a.shape == b.shape;
    if (!shapes_agree) {
      return absl::StrCat(ragged ? "shape mismatch beyond the first dimension" : "shape mismatch",
                          which, ": ", both(ShapeString(a.shape), ShapeString(b.shape)));
    }
  }
  const bool reduces = first.kind == OpKind::kAllreduce || first.kind == OpKind::kReduceScatter;
  if (reduces && first.op != other.op) {
    return absl::StrCat("reduce op mismatch: ",
                        both(ReduceOpName(first.op), ReduceOpName(other.op)));
  }
  if (reduces && (first.prescale != other.prescale || first.postscale != other.postscale)) {
    return absl::StrCat(
        "scale mismatch: ",
        both(absl::StrCat("prescale ", first.prescale, " postscale ", first.postscale),
             absl::StrCat("prescale ", other.prescale, " postscale ", other.postscale)));
  }
  if (first.kind == OpKind::kAllreduce && first.update_schedule != other.update_schedule) {
    const auto text = [](const std::string& s) { return s.empty() ? std::string("no delay") : s; };
    return absl::StrCat("update schedule mismatch: ",
                        both(text(first.update_schedule), text(other.update_schedule)));
  }
  if (first.kind == OpKind::kAllreduce && first.plan_may_delay != other.plan_may_delay) {
    const auto text = [](bool may) {
      return std::string(may ? "a gradient a delayed plan may deliver late (plan_may_delay)"
                             : "a tensor it reads at once (no plan_may_delay)");
    };
    return absl::StrCat("plan_may_delay mismatch: ",
                        both(text(first.plan_may_delay), text(other.plan_may_delay)));
  }
  if (first.kind == OpKind::kAllreduce && first.compression != other.compression) {
    return absl::StrCat("compression mismatch: ", both(first.compression, other.compression));
  }
  if (first.kind == OpKind::kBroadcast && first.root != other.root) {
    return absl::StrCat("root rank mismatch: ",
                        both(absl::StrCat("root ", first.root), absl::StrCat("root ", other.root)));
  }
  return "";
}

}  // namespace

Response MatchRequests(const std::vector<const Request*>& requests) {
  Response response;
  int first_rank = -1;
  for (size_t r = 0; r < requests.size(); ++r) {
    if (requests[r] != nullptr) {
      first_rank = static_cast<int>(r);
      break;
    }
  }
  const Request& first = *requests[static_cast<size_t>(first_rank)];
  response.name = first.name;
  response.request = first;
  const int size = static_cast<int>(requests.size());
  std::vector<int> joined;
  for (int r = 0; r < size; ++r) {
    const Request* other = requests[static_cast<size_t>(r)];
    if (other == nullptr) {
      joined.push_back(r);
      continue;
    }
    const std::string difference = Disagreement(first, first_rank, *other, r);
    if (!difference.empty()) {
      response.error = absl::StrCat(Describe(first), ": ", difference);
      return response;
    }
  }
  if (!joined.empty() && first.kind != OpKind::kAllreduce && first.kind != OpKind::kJoin) {
    response.error = absl::StrCat(
        Describe(first), ": only allreduce can run while ranks have joined; joined ranks: ",
        absl::StrJoin(joined, ","));
    return response;
  }
  if (first.kind == OpKind::kAllgather) {
    // Every request agrees with the first on tensor count and rank (above). The API submits one
    // tensor of rank >= 1; a peer's bytes that say otherwise are refused, not indexed.
    if (first.tensors.size() != 1 || first.tensors[0].shape.empty()) {
      response.error = absl::StrCat(
          Describe(first), ": allgather needs one tensor of at least one dimension; rank ",
          first_rank, " sent ",
          first.tensors.size() == 1 ? "a scalar" : absl::StrCat(first.tensors.size(), " tensors"));
      return response;
    }
    for (const Request* r : requests) response.rank_rows.push_back(r->tensors[0].shape[0]);
  } else if (first.kind == OpKind::kAlltoall) {
    for (const Request* r : requests) {
      response.rank_rows.insert(response.rank_rows.end(), r->splits.begin(), r->splits.end());
    }
  }
  return response;
}

}  // namespace overlap
