// The profiles bundled with overlap (scheduler/profiles/*.json), compiled into the binary so the
// simulator and the runtime need no data files. scheduler/profiles/README.md says where each one
// comes from.
#ifndef OVERLAP_SCHEDULER_BUILTIN_H_
#define OVERLAP_SCHEDULER_BUILTIN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/profile.h"

namespace overlap::sched {

// Names of the bundled profiles, e.g. "resnet50", "vgg16", "bert-base", "gpt2-small".
std::vector<std::string> BuiltinModelNames();

// A bundled profile by name; NotFound listing the valid names otherwise.
absl::StatusOr<Profile> LoadBuiltinProfile(absl::string_view name);

}  // namespace overlap::sched

#endif  // OVERLAP_SCHEDULER_BUILTIN_H_
