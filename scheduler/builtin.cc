#include "scheduler/builtin.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap::sched {

// Defined in the file the :builtin_profiles_cc genrule writes.
struct BuiltinProfileText {
  const char* name;
  const char* json;
};
extern const BuiltinProfileText kBuiltinProfiles[];
extern const int kNumBuiltinProfiles;

std::vector<std::string> BuiltinModelNames() {
  std::vector<std::string> names;
  for (int i = 0; i < kNumBuiltinProfiles; ++i) {
    names.push_back(kBuiltinProfiles[i].name);
  }
  return names;
}

absl::StatusOr<Profile> LoadBuiltinProfile(absl::string_view name) {
  for (int i = 0; i < kNumBuiltinProfiles; ++i) {
    if (name == kBuiltinProfiles[i].name) {
      return ParseProfileJson(kBuiltinProfiles[i].json,
                              absl::StrCat("scheduler/profiles/", name, ".json"));
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown model '", name, "'; valid models: ", absl::StrJoin(BuiltinModelNames(), ", ")));
}

}  // namespace overlap::sched
