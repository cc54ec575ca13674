// Small helpers shared by the negotiator and planned mode: bit vectors over ids or ranks, and
// rank lists as messages print them.
#ifndef OVERLAP_RUNTIME_RANK_BITS_H_
#define OVERLAP_RUNTIME_RANK_BITS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap {

inline size_t Words(size_t bits) { return (bits + 63) / 64; }
inline bool TestBit(const std::vector<uint64_t>& v, size_t i) {
  return (v[i / 64] >> (i % 64)) & 1u;
}
inline void SetBit(std::vector<uint64_t>* v, size_t i) { (*v)[i / 64] |= uint64_t{1} << (i % 64); }

// "[0 (host-a), 3 (host-b)]".
inline std::string RankList(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  std::vector<std::string> parts;
  for (int r : ranks) parts.push_back(absl::StrCat(r, " (", hosts[static_cast<size_t>(r)], ")"));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

// Why an operation cannot complete once `ranks` have shut down: "ranks [1 (h)] have called
// Shutdown (...)", for the negotiator's and the planned executor's errors alike.
inline std::string ShutDownRanks(const std::vector<int>& ranks,
                                 const std::vector<std::string>& hosts) {
  return absl::StrCat("ranks ", RankList(ranks, hosts),
                      " have called Shutdown (the program ended, returned or exited, sys.exit "
                      "included)");
}

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_RANK_BITS_H_
