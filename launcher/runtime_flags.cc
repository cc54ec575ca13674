#include "launcher/runtime_flags.h"

#include <vector>

namespace overlap::launcher {

absl::Span<const env::Var* const> RuntimeFlags() {
  static const std::vector<const env::Var*>* const flags = [] {
    auto* out = new std::vector<const env::Var*>;
    for (const env::Var& var : env::Vars()) {
      if (var.flag.name != nullptr) out->push_back(&var);
    }
    return out;
  }();
  return *flags;
}

const env::Var* FindRuntimeFlag(absl::string_view flag) { return env::FindByFlag(flag); }

absl::StatusOr<std::string> RuntimeFlagValue(const env::Var& var, absl::string_view value) {
  return env::FlagToValue(var, value);
}

}  // namespace overlap::launcher
