#include "runtime/control/host_layout.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap {
namespace {

std::string RanksOn(const HostLayout& layout, int host) {
  std::vector<int> ranks;
  for (size_t r = 0; r < layout.host_of_rank.size(); ++r) {
    if (layout.host_of_rank[r] == host) ranks.push_back(static_cast<int>(r));
  }
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ","));
}

}  // namespace

HostLayout LayoutOf(absl::Span<const std::string> host_of_rank) {
  HostLayout layout;
  absl::flat_hash_map<std::string, int> index;
  for (const std::string& host : host_of_rank) {
    auto [it, inserted] = index.try_emplace(host, static_cast<int>(layout.hosts.size()));
    if (inserted) {
      layout.hosts.push_back(host);
      layout.ranks_on_host.push_back(0);
    }
    layout.host_of_rank.push_back(it->second);
    ++layout.ranks_on_host[static_cast<size_t>(it->second)];
  }
  return layout;
}

int HierarchyHost(const HostLayout& layout, int rank, bool requested, std::string* why_flat) {
  if (!requested) return -1;
  const auto [fewest, most] =
      std::minmax_element(layout.ranks_on_host.begin(), layout.ranks_on_host.end());
  if (layout.hosts.size() < 2) {
    *why_flat = absl::StrCat("all ", layout.host_of_rank.size(), " ranks are on one host (",
                             layout.hosts.empty() ? "" : layout.hosts.front(), ")");
    return -1;
  }
  if (*fewest != *most) {
    std::vector<std::string> counts;
    for (size_t h = 0; h < layout.hosts.size(); ++h) {
      counts.push_back(absl::StrCat(layout.hosts[h], " has ", layout.ranks_on_host[h], " (",
                                    RanksOn(layout, static_cast<int>(h)), ")"));
    }
    *why_flat =
        absl::StrCat("hosts hold different numbers of ranks: ", absl::StrJoin(counts, ", "));
    return -1;
  }
  if (*most == 1) {
    *why_flat = absl::StrCat("every host runs one rank (", layout.hosts.size(), " hosts)");
    return -1;
  }
  return layout.host_of_rank[static_cast<size_t>(rank)];
}

std::string HierarchyWord(int hierarchical, const std::string& host) {
  return absl::StrCat(hierarchical, " ", host);
}

absl::StatusOr<HostLayout> AgreeOnHierarchy(absl::Span<const std::string> words,
                                            bool* hierarchical) {
  std::vector<std::string> hosts;
  std::vector<int> settings;
  for (size_t r = 0; r < words.size(); ++r) {
    const size_t space = words[r].find(' ');
    if (space != 1 || (words[r][0] != '0' && words[r][0] != '1')) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " sent a malformed host word '", words[r], "'"));
    }
    settings.push_back(words[r][0] - '0');
    hosts.push_back(words[r].substr(space + 1));
  }
  std::vector<int> differ;
  for (size_t r = 1; r < settings.size(); ++r) {
    if (settings[r] != settings[0]) differ.push_back(static_cast<int>(r));
  }
  if (!differ.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "OVERLAP_HIERARCHICAL_ALLREDUCE differs between ranks: rank 0 has ",
        settings.empty() ? 0 : settings[0], ", ", differ.size() == 1 ? "rank " : "ranks ",
        absl::StrJoin(differ, ","), " ", differ.size() == 1 ? "has " : "have ",
        1 - (settings.empty() ? 0 : settings[0]),
        "; set it alike on every rank (overlaprun --hierarchical-allreduce does)"));
  }
  *hierarchical = !settings.empty() && settings[0] == 1;
  return LayoutOf(hosts);
}

}  // namespace overlap
