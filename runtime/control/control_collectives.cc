#include "runtime/control/control_collectives.h"

#include "absl/strings/str_cat.h"
#include "collectives/poll_wait.h"

namespace overlap {

absl::Status RunControl(
    const std::function<absl::StatusOr<std::unique_ptr<ControlRequest>>()>& start,
    absl::Duration limit, absl::string_view what, const std::function<absl::Status()>& check) {
  absl::StatusOr<std::unique_ptr<ControlRequest>> request = start();
  if (!request.ok()) {
    return absl::Status(request.status().code(),
                        absl::StrCat(what, " failed: ", request.status().message()));
  }
  ControlRequest* started = request->get();
  return PollWithDeadline([started] { return started->Test(); }, limit, what, check);
}

}  // namespace overlap
