// Linked into the scheduled suites' `_device_proxy` binaries: before main (and so before Init),
// makes the proxy device (tests/fakes/proxy_device.h) the runtime's device backend and puts the
// suites' gradients on it, so that the same test bodies run the device code path. Compiled with
// OVERLAP_TEST_MIXED_DEVICES (the `_mixed_device_proxy` binaries), about half stay on the host.
#include "runtime/planes/device_backend.h"
#include "tests/fakes/proxy_device.h"
#include "tests/runtime/gradient_options.h"

namespace overlap::testing {
namespace {

[[maybe_unused]] const bool installed = [] {
  InstallDeviceBackendForTesting(fake::CreateProxyDeviceBackend());
  GradientDevice() = Device::Cuda(0);
#ifdef OVERLAP_TEST_MIXED_DEVICES
  GradientDevicesMixed() = true;
#endif
  return true;
}();

}  // namespace
}  // namespace overlap::testing
