#include "launcher/hosts.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace overlap::launcher {
namespace {

absl::StatusOr<int> ParseSlots(absl::string_view text, absl::string_view where) {
  int slots = 0;
  if (!absl::SimpleAtoi(text, &slots) || slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": slot count '", text, "' is not a positive integer"));
  }
  return slots;
}

// "host" or "host:N".
absl::StatusOr<HostSlots> ParseHostEntry(absl::string_view entry, absl::string_view where) {
  HostSlots out;
  std::vector<absl::string_view> parts = absl::StrSplit(entry, absl::MaxSplits(':', 1));
  out.host = std::string(absl::StripAsciiWhitespace(parts[0]));
  if (out.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": '", entry, "' has no host name"));
  }
  // Anything else would change meaning in the -H list that mpirun gets (a ',' splits a host in
  // two, a ':' starts a slot count) or is no host name at all.
  for (char c : out.host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": host name '", absl::CHexEscape(out.host),
                       "' may only have letters, digits, '.', '-' and '_'"));
    }
  }
  if (parts.size() == 2) {
    absl::StatusOr<int> slots = ParseSlots(absl::StripAsciiWhitespace(parts[1]), where);
    if (!slots.ok()) {
      return slots.status();
    }
    out.slots = *slots;
  }
  return out;
}

absl::Status CheckUnique(const std::vector<HostSlots>& hosts, absl::string_view source) {
  std::set<std::string> seen;
  for (const HostSlots& h : hosts) {
    if (!seen.insert(h.host).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": host '", h.host, "' is listed twice; give it once with all its slots"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<HostSlots>> ParseHostList(absl::string_view list) {
  std::vector<HostSlots> hosts;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    absl::StatusOr<HostSlots> h = ParseHostEntry(entry, absl::StrCat("-H '", list, "'"));
    if (!h.ok()) {
      return h.status();
    }
    hosts.push_back(*std::move(h));
  }
  absl::Status unique = CheckUnique(hosts, "-H");
  if (!unique.ok()) {
    return unique;
  }
  return hosts;
}

absl::StatusOr<std::vector<HostSlots>> ParseHostfile(absl::string_view text,
                                                     absl::string_view source) {
  std::vector<HostSlots> hosts;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) {
      continue;
    }
    const std::string where = absl::StrCat("hostfile ", source, " line ", line_number);
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    absl::StatusOr<HostSlots> h = ParseHostEntry(words[0], where);
    if (!h.ok()) {
      return h.status();
    }
    for (size_t i = 1; i < words.size(); ++i) {
      absl::string_view word = words[i];
      if (absl::ConsumePrefix(&word, "slots=")) {
        absl::StatusOr<int> slots = ParseSlots(word, where);
        if (!slots.ok()) {
          return slots.status();
        }
        h->slots = *slots;
      } else if (absl::ConsumePrefix(&word, "max_slots=")) {
        // Accepted for compatibility with Open MPI hostfiles; the slot count is what we plan with.
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": unknown '", words[i], "' (expected 'host', 'host slots=N' or 'host:N')"));
      }
    }
    hosts.push_back(*std::move(h));
  }
  if (hosts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("hostfile ", source, " lists no hosts"));
  }
  absl::Status unique = CheckUnique(hosts, absl::StrCat("hostfile ", source));
  if (!unique.ok()) {
    return unique;
  }
  return hosts;
}

absl::StatusOr<std::vector<HostSlots>> ReadHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("hostfile ", path, " cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseHostfile(text.str(), path);
}

int TotalSlots(const std::vector<HostSlots>& hosts) {
  // Summed wide and capped: two hosts of 2^31-1 slots each parse, and must not overflow.
  int64_t total = 0;
  for (const HostSlots& h : hosts) {
    total = std::min<int64_t>(total + h.slots, std::numeric_limits<int>::max());
  }
  return static_cast<int>(total);
}

std::string HostOfRank(const std::vector<HostSlots>& hosts, int rank) {
  for (const HostSlots& h : hosts) {
    if (rank < h.slots) {
      return h.host;
    }
    rank -= h.slots;
  }
  return "";
}

std::string FormatHostList(const std::vector<HostSlots>& hosts) {
  return absl::StrJoin(hosts, ",", [](std::string* out, const HostSlots& h) {
    absl::StrAppend(out, h.host, ":", h.slots);
  });
}

}  // namespace overlap::launcher
