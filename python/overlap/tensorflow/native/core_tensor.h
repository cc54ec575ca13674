// TensorFlow tensors as the core library's overlap_tensor descriptions, and back.
//
// Only host memory is described: the op library registers CPU kernels (tensorflow-cpu). The
// dtypes are the core's (collectives/dtype.h); the Python layer casts the others (bool, int16)
// before they reach a kernel, so a refusal here means a caller bypassed it.
#ifndef OVERLAP_TF_CORE_TENSOR_H_
#define OVERLAP_TF_CORE_TENSOR_H_

#include <string>
#include <vector>

#include "c_api.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace overlap_tf {

// overlap::DataType codes (collectives/dtype.h); -1 for a dtype the core does not carry.
inline int CoreDtype(tensorflow::DataType dtype) {
  switch (dtype) {
    case tensorflow::DT_UINT8:
      return 0;
    case tensorflow::DT_INT8:
      return 1;
    case tensorflow::DT_INT32:
      return 2;
    case tensorflow::DT_INT64:
      return 3;
    case tensorflow::DT_HALF:
      return 4;
    case tensorflow::DT_BFLOAT16:
      return 5;
    case tensorflow::DT_FLOAT:
      return 6;
    case tensorflow::DT_DOUBLE:
      return 7;
    default:
      return -1;
  }
}

// A tensor's description; owns the shape array the description points at, so it must outlive
// the submission call (not the operation: the core copies the description).
class CoreTensor {
 public:
  explicit CoreTensor(const tensorflow::Tensor& tensor) {
    for (int i = 0; i < tensor.dims(); ++i) dims_.push_back(tensor.dim_size(i));
    desc_.data = const_cast<char*>(tensor.tensor_data().data());
    desc_.capacity_bytes = static_cast<int64_t>(tensor.TotalBytes());
    desc_.dtype = CoreDtype(tensor.dtype());
    desc_.ndim = static_cast<int32_t>(dims_.size());
    desc_.shape = dims_.data();
    desc_.device_kind = 0;  // CPU
    desc_.device_index = 0;
    desc_.stream = nullptr;
  }
  CoreTensor(const CoreTensor&) = delete;
  CoreTensor& operator=(const CoreTensor&) = delete;

  const overlap_tensor* desc() const { return &desc_; }
  bool supported() const { return desc_.dtype >= 0; }

 private:
  std::vector<int64_t> dims_;
  overlap_tensor desc_{};
};

// The TensorFlow dtype of a core dtype code (the inverse of CoreDtype).
inline tensorflow::DataType TfDtype(int32_t core) {
  static const tensorflow::DataType kTypes[] = {
      tensorflow::DT_UINT8, tensorflow::DT_INT8,     tensorflow::DT_INT32, tensorflow::DT_INT64,
      tensorflow::DT_HALF,  tensorflow::DT_BFLOAT16, tensorflow::DT_FLOAT, tensorflow::DT_DOUBLE};
  return core >= 0 && core < 8 ? kTypes[core] : tensorflow::DT_INVALID;
}

}  // namespace overlap_tf

#endif  // OVERLAP_TF_CORE_TENSOR_H_
