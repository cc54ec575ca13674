// Small helpers shared by the negotiator and planned mode: bit vectors over ids or ranks, and
// rank lists as messages print them.
#ifndef OVERLAP_RUNTIME_NEGOTIATION_RANK_BITS_H_
#define OVERLAP_RUNTIME_NEGOTIATION_RANK_BITS_H_

#include <algorithm>
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

// The tail of a "cannot complete" error: names the shut-down ranks `gone` as the cause and the
// other ranks in `missing` only as late ("ranks [0 (h)] had not reached it yet"), since those
// may be about to submit; a rank must not read itself blamed for what it was about to do.
inline std::string MissingBecauseShutDown(const std::vector<int>& missing,
                                          const std::vector<int>& gone,
                                          const std::vector<std::string>& hosts,
                                          const std::string& what_more) {
  std::vector<int> late;
  for (int r : missing) {
    if (std::find(gone.begin(), gone.end(), r) == gone.end()) late.push_back(r);
  }
  return absl::StrCat(
      "but not by ranks ", RankList(gone, hosts), "; ", ShutDownRanks(gone, hosts), " and will ",
      what_more, " nothing more",
      late.empty() ? "" : absl::StrCat("; ranks ", RankList(late, hosts), " had not reached it yet"));
}

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_NEGOTIATION_RANK_BITS_H_
