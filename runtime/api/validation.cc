#include "runtime/api/validation.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/buffer_ops.h"
#include "runtime/planes/cuda_compression.h"
#include "runtime/planes/device_backend.h"

namespace overlap {
namespace {

absl::Status Invalid(const Request& r, const std::string& cause) {
  return absl::InvalidArgumentError(absl::StrCat(OpKindName(r.kind), " '", r.name, "': ", cause));
}

absl::Status CheckTensor(const Request& r, const Tensor& t, const char* role) {
  absl::Status dtype = ValidateDataType(t.dtype);
  if (!dtype.ok()) return Invalid(r, absl::StrCat(role, ": ", dtype.message()));
  for (int64_t d : t.shape) {
    if (d < 0) {
      return Invalid(
          r, absl::StrCat(role, " has a negative dimension in shape ", ShapeString(t.shape)));
    }
  }
  if (t.NumElements() > 0 && t.data == nullptr) {
    return Invalid(r, absl::StrCat(role, " buffer is null"));
  }
  if (t.capacity_bytes < t.ByteSize()) {
    return Invalid(r, absl::StrCat(role, " buffer holds ", t.capacity_bytes, " bytes but shape ",
                                   ShapeString(t.shape), " of ", DataTypeName(t.dtype), " needs ",
                                   t.ByteSize()));
  }
  return absl::OkStatus();
}

absl::Status CheckSameLayout(const Request& r, const Tensor& in, const Tensor& out) {
  if (in.dtype != out.dtype || in.shape != out.shape) {
    return Invalid(
        r, absl::StrCat("output ", DataTypeName(out.dtype), ShapeString(out.shape),
                        " does not match input ", DataTypeName(in.dtype), ShapeString(in.shape)));
  }
  return absl::OkStatus();
}

absl::Status CheckReduction(const Request& r, DataType dtype) {
  absl::Status op = ValidateReduceOp(r.op);
  if (!op.ok()) return Invalid(r, std::string(op.message()));
  if (!IsFloatingPoint(dtype) && (r.prescale != 1.0 || r.postscale != 1.0)) {
    return Invalid(
        r, absl::StrCat("prescale/postscale must be 1 for integer dtype ", DataTypeName(dtype)));
  }
  return absl::OkStatus();
}

// Every tensor of the operation on one device, and that device usable here.
absl::Status CheckDevices(const PendingOp& op) {
  const Request& r = op.request;
  if (op.inputs.empty()) return absl::OkStatus();
  const Device device = op.inputs[0].device;
  for (size_t i = 0; i < op.inputs.size() || i < op.outputs.size(); ++i) {
    for (const auto& [tensors, role] : {std::pair{&op.inputs, "input"}, std::pair{&op.outputs, "output"}}) {
      if (i >= tensors->size() || (*tensors)[i].device == device) continue;
      return Invalid(r, absl::StrCat(role, " ", i, " is on ", (*tensors)[i].device.ToString(),
                                     " but input 0 is on ", device.ToString(),
                                     "; one operation's tensors must share a device"));
    }
  }
  if (!device.is_cuda()) return absl::OkStatus();
  const int visible = Devices().DeviceCount();
  if (visible == 0) {
    return Invalid(
        r, absl::StrCat("tensor on ", device.ToString(), ", but ", Devices().UnavailableReason()));
  }
  if (device.index < 0 || device.index >= visible) {
    return Invalid(r, absl::StrCat("tensor on ", device.ToString(), ", but this process sees ",
                                   visible, " CUDA device", visible == 1 ? "" : "s"));
  }
  if (r.kind == OpKind::kAllreduce && r.compression != "none") {
    absl::Status supported = CudaCompressionSupports(r.compression);
    if (!supported.ok()) return Invalid(r, std::string(supported.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateOp(const PendingOp& op, int size) {
  const Request& r = op.request;
  if (r.name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(OpKindName(r.kind), ": empty tensor name"));
  }
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    absl::Status s = CheckTensor(r, op.inputs[i], "input");
    if (s.ok() && i < op.outputs.size()) s = CheckTensor(r, op.outputs[i], "output");
    if (s.ok() && i < op.outputs.size()) s = CheckSameLayout(r, op.inputs[i], op.outputs[i]);
    if (!s.ok()) return s;
  }
  absl::Status devices = CheckDevices(op);
  if (!devices.ok()) return devices;
  switch (r.kind) {
    case OpKind::kAllreduce:
      if (op.inputs.empty()) return Invalid(r, "no tensors");
      if (r.compression != "none" && (op.inputs[0].dtype != DataType::kFloat32 ||
                                      (r.op != ReduceOp::kSum && r.op != ReduceOp::kAverage))) {
        return Invalid(r, absl::StrCat("compression '", r.compression,
                                       "' needs float32 tensors and op sum or average, not ",
                                       DataTypeName(op.inputs[0].dtype), " ", ReduceOpName(r.op)));
      }
      if (op.inputs.size() != op.outputs.size()) {
        return Invalid(r, "inputs and outputs differ in number");
      }
      for (const Tensor& t : op.inputs) {
        if (t.dtype != op.inputs[0].dtype) {
          return Invalid(r, "a grouped allreduce needs one dtype for all tensors");
        }
      }
      if (r.op == ReduceOp::kAdasum) {
        absl::Status adasum = AdasumSupports(size, op.inputs[0].dtype);
        if (!adasum.ok()) return Invalid(r, std::string(adasum.message()));
      }
      return CheckReduction(r, op.inputs[0].dtype);
    case OpKind::kReduceScatter: {
      if (r.op == ReduceOp::kAdasum) return Invalid(r, "Adasum is an allreduce only");
      absl::Status s = CheckReduction(r, op.inputs[0].dtype);
      if (s.ok() && op.inputs[0].shape.empty()) {
        s = Invalid(r, "needs at least one dimension to scatter");
      }
      return s;
    }
    case OpKind::kAllgather:
      if (op.inputs[0].shape.empty()) {
        return Invalid(r, "needs at least one dimension to gather along");
      }
      return absl::OkStatus();
    case OpKind::kBroadcast:
      if (r.root < 0 || r.root >= size) {
        return Invalid(r, absl::StrCat("root rank ", r.root, " is outside [0, ", size, ")"));
      }
      return absl::OkStatus();
    case OpKind::kAlltoall: {
      const std::vector<int64_t>& shape = op.inputs[0].shape;
      if (shape.empty()) return Invalid(r, "needs at least one dimension to split");
      if (static_cast<int>(r.splits.size()) != size) {
        return Invalid(r, absl::StrCat(r.splits.size(), " splits for ", size, " ranks"));
      }
      int64_t sum = 0;
      for (int64_t s : r.splits) {
        if (s < 0) return Invalid(r, "negative split");
        sum += s;
      }
      if (sum != shape[0]) {
        return Invalid(r, absl::StrCat("splits add up to ", sum,
                                       " rows but the first dimension is ", shape[0]));
      }
      return absl::OkStatus();
    }
    default:
      return absl::OkStatus();
  }
}

}  // namespace overlap
