// Where a tensor's memory lives: host memory, or CUDA device k.
#ifndef OVERLAP_COLLECTIVES_DEVICE_H_
#define OVERLAP_COLLECTIVES_DEVICE_H_

#include <string>

namespace overlap {

enum class DeviceKind : int {
  kCpu = 0,
  kCuda = 1,
};

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // CUDA device ordinal; 0 for the CPU

  static Device Cpu() { return Device{}; }
  static Device Cuda(int index) { return Device{DeviceKind::kCuda, index}; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
  // "cpu", "cuda:0".
  std::string ToString() const {
    return is_cuda() ? "cuda:" + std::to_string(index) : std::string("cpu");
  }
  friend bool operator==(const Device& a, const Device& b) {
    return a.kind == b.kind && (a.kind == DeviceKind::kCpu || a.index == b.index);
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

}  // namespace overlap

#endif  // OVERLAP_COLLECTIVES_DEVICE_H_
