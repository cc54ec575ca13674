// Where the ranks sit, for the hierarchical allreduce (collectives/hierarchical_allreduce.h):
// which host each rank is on, and whether the layout allows a two-level allreduce.
//
// Every rank computes this from the same gathered words, so every rank decides alike.
#ifndef OVERLAP_RUNTIME_CONTROL_HOST_LAYOUT_H_
#define OVERLAP_RUNTIME_CONTROL_HOST_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace overlap {

struct HostLayout {
  std::vector<std::string> hosts;  // in order of their lowest rank
  std::vector<int> host_of_rank;   // index into `hosts`, by rank
  std::vector<int> ranks_on_host;  // by host
};

// The layout of ranks whose hosts are `host_of_rank` (one name per rank).
HostLayout LayoutOf(absl::Span<const std::string> host_of_rank);

// This rank's host index for MpiExecutorOptions::host when `requested` (the agreed
// OVERLAP_HIERARCHICAL_ALLREDUCE), else -1. -1 with `*why_flat` set when the layout cannot use a
// two-level allreduce: one host, one rank per host, or hosts holding different numbers of ranks
// (named, e.g. "hosts hold different numbers of ranks: a has 2 (ranks 0,1), b has 1 (rank 2)").
int HierarchyHost(const HostLayout& layout, int rank, bool requested, std::string* why_flat);

// Every rank's word for the hierarchy, "<OVERLAP_HIERARCHICAL_ALLREDUCE> <host id>", and the
// inverse. A rank whose setting differs from rank 0's fails Init on every rank: the ranks would
// otherwise run different allreduces and hang.
std::string HierarchyWord(int hierarchical, const std::string& host);
// The agreed setting and each rank's host; InvalidArgument naming the ranks that differ from
// rank 0, or a malformed word.
absl::StatusOr<HostLayout> AgreeOnHierarchy(absl::Span<const std::string> words,
                                            bool* hierarchical);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CONTROL_HOST_LAYOUT_H_
