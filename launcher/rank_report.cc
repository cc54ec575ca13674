#include "launcher/rank_report.h"

#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace overlap::launcher {
namespace {

const char* HowName(RankReport::How how) {
  switch (how) {
    case RankReport::How::kExited:
      return "exit";
    case RankReport::How::kSignaled:
      return "signal";
    case RankReport::How::kExecFailed:
      return "exec";
  }
  return "exit";
}

std::optional<RankReport::How> HowFromName(absl::string_view name) {
  if (name == "exit") {
    return RankReport::How::kExited;
  }
  if (name == "signal") {
    return RankReport::How::kSignaled;
  }
  if (name == "exec") {
    return RankReport::How::kExecFailed;
  }
  return std::nullopt;
}

}  // namespace

std::string SignalName(int sig) {
  // sigabbrev_np needs glibc 2.32; Debian 12 has 2.36.
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

std::string FormatRankStart(int rank) {
  return absl::StrCat(kRankStartMarker, " rank=", rank, "\n");
}

std::optional<int> ParseRankStart(absl::string_view line) {
  const size_t at = line.find(kRankStartMarker);
  if (at == absl::string_view::npos) {
    return std::nullopt;
  }
  line.remove_prefix(at + strlen(kRankStartMarker));
  line = absl::StripAsciiWhitespace(line);
  int rank = 0;
  if (!absl::ConsumePrefix(&line, "rank=") || !absl::SimpleAtoi(line, &rank)) {
    return std::nullopt;
  }
  return rank;
}

std::string FormatRankReport(const RankReport& r) {
  return absl::StrCat(kRankReportMarker, " rank=", r.rank, " host=", r.host, " pid=", r.pid,
                      " how=", HowName(r.how), " code=", r.code, " end_ms=", r.end_ms,
                      " stopped=", r.stopped_by_launcher ? 1 : 0, "\n");
}

std::optional<RankReport> ParseRankReport(absl::string_view line) {
  size_t at = line.find(kRankReportMarker);
  if (at == absl::string_view::npos) {
    return std::nullopt;
  }
  line.remove_prefix(at + strlen(kRankReportMarker));
  std::map<std::string, std::string> fields;
  for (absl::string_view word :
       absl::StrSplit(line, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(word, absl::MaxSplits('=', 1));
    if (kv.size() == 2) {
      fields[kv[0]] = kv[1];
    }
  }
  RankReport r;
  int stopped = 0;
  std::optional<RankReport::How> how = HowFromName(fields["how"]);
  if (!how || !absl::SimpleAtoi(fields["rank"], &r.rank) ||
      !absl::SimpleAtoi(fields["pid"], &r.pid) || !absl::SimpleAtoi(fields["code"], &r.code) ||
      !absl::SimpleAtoi(fields["end_ms"], &r.end_ms) ||
      !absl::SimpleAtoi(fields["stopped"], &stopped) || fields["host"].empty()) {
    return std::nullopt;
  }
  r.how = *how;
  r.host = fields["host"];
  r.stopped_by_launcher = stopped != 0;
  return r;
}

std::string DescribeEnd(const RankReport& r) {
  switch (r.how) {
    case RankReport::How::kExited:
      return absl::StrCat("exited with status ", r.code);
    case RankReport::How::kSignaled:
      return absl::StrCat("was killed by signal ", r.code, " (", SignalName(r.code), ")");
    case RankReport::How::kExecFailed:
      return absl::StrCat("could not start its program: ", strerror(r.code));
  }
  return "ended";
}

int ExitStatusFor(const RankReport& r) {
  switch (r.how) {
    case RankReport::How::kExited:
      return r.code != 0 ? r.code : 1;
    case RankReport::How::kSignaled:
      return 128 + r.code;
    case RankReport::How::kExecFailed:
      return 127;
  }
  return 1;
}

}  // namespace overlap::launcher
