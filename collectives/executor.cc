#include "collectives/executor.h"

namespace overlap {

const char* CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce:
      return "allreduce";
    case CollectiveKind::kAllgatherv:
      return "allgather";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kReduceScatter:
      return "reducescatter";
    case CollectiveKind::kAlltoallv:
      return "alltoall";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "unknown";
}

}  // namespace overlap
