// Adaptive allreduces (link_adaptation.h).
#include "collectives/link_adaptation.h"

#include "absl/strings/str_cat.h"

namespace overlap {

const char* LinkAdaptationName(LinkAdaptation adaptation) {
  switch (adaptation) {
    case LinkAdaptation::kOff:
      return "off";
    case LinkAdaptation::kAuto:
      return "auto";
    case LinkAdaptation::kOn:
      return "on";
  }
  return "?";
}

absl::StatusOr<LinkAdaptation> ParseLinkAdaptation(absl::string_view name) {
  if (name == "off") return LinkAdaptation::kOff;
  if (name == "auto") return LinkAdaptation::kAuto;
  if (name == "on") return LinkAdaptation::kOn;
  return absl::InvalidArgumentError(
      absl::StrCat("adaptive allreduce '", name, "' is not one of off, auto, on"));
}

absl::StatusOr<bool> ProbedAllreduce::Test() {
  if (allreduce_ == nullptr) {
    absl::StatusOr<bool> probed = probe_->Test();
    if (!probed.ok()) return probed.status();
    if (!*probed) return false;
    absl::StatusOr<std::unique_ptr<Work>> allreduce = decide_(*probe_);
    if (!allreduce.ok()) return allreduce.status();
    allreduce_ = std::move(*allreduce);
  }
  return allreduce_->Test();
}

}  // namespace overlap
