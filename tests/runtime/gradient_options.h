// The options a training loop's gradients are reduced with in the scheduled-plan tests: a delayed
// plan may deliver them late (AllreduceOptions::plan_may_delay), as the adapters' optimizers ask;
// and the device their gradients live on.
#ifndef OVERLAP_TESTS_RUNTIME_GRADIENT_OPTIONS_H_
#define OVERLAP_TESTS_RUNTIME_GRADIENT_OPTIONS_H_

#include <string>

#include "runtime/overlap.h"

namespace overlap::testing {

inline AllreduceOptions GradientOptions() {
  AllreduceOptions options;
  options.plan_may_delay = true;
  return options;
}

// Where the suites' gradients live: the CPU, or the proxy device in their `_device_proxy` variants
// (tests/runtime/device_proxy_install.cc sets it before main).
inline Device& GradientDevice() {
  static Device device;
  return device;
}

// The `_mixed_device_proxy` variants: about half the gradients (by name) stay on the host, so that
// one plan holds both.
inline bool& GradientDevicesMixed() {
  static bool mixed = false;
  return mixed;
}

// Gradient `name`: `n` floats at `data`, on GradientDevice() (the proxy device's memory is host
// memory), or, in the mixed variants, on the host when the sum of the name's characters is even.
inline Tensor GradientTensor(const std::string& name, float* data, int64_t n) {
  Tensor tensor = MakeTensor(data, {n});
  int sum = 0;
  for (char c : name) sum += static_cast<unsigned char>(c);
  const bool host = GradientDevicesMixed() && sum % 2 == 0;
  tensor.device = host ? Device::Cpu() : GradientDevice();
  return tensor;
}

}  // namespace overlap::testing

#endif  // OVERLAP_TESTS_RUNTIME_GRADIENT_OPTIONS_H_
