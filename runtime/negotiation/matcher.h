// Rank 0's check that every rank asked for the same operation under one name.
#ifndef OVERLAP_RUNTIME_NEGOTIATION_MATCHER_H_
#define OVERLAP_RUNTIME_NEGOTIATION_MATCHER_H_

#include <vector>

#include "runtime/negotiation/messages.h"

namespace overlap {

// Compares the requests that all ranks submitted for one name and returns the agreed response,
// or one whose `error` names the first disagreement and the ranks involved, e.g.
// "allreduce 'w': shape mismatch: rank 0 submitted [2,3], rank 1 submitted [2,4]".
// `requests[r]` is null for a rank that has joined; joined ranks may only take part in
// allreduces. At least one entry is non-null. The response's cache_id is left at -1.
Response MatchRequests(const std::vector<const Request*>& requests);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_NEGOTIATION_MATCHER_H_
