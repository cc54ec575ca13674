// Tensor views and their constructors (runtime/overlap.h).
#include "runtime/overlap.h"

namespace overlap {

int64_t Tensor::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor MakeTensor(void* data, DataType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.capacity_bytes = t.ByteSize();
  return t;
}
Tensor MakeTensor(float* data, std::vector<int64_t> shape) {
  return MakeTensor(data, DataType::kFloat32, std::move(shape));
}
Tensor MakeTensor(double* data, std::vector<int64_t> shape) {
  return MakeTensor(data, DataType::kFloat64, std::move(shape));
}
Tensor MakeTensor(int32_t* data, std::vector<int64_t> shape) {
  return MakeTensor(data, DataType::kInt32, std::move(shape));
}
Tensor MakeTensor(int64_t* data, std::vector<int64_t> shape) {
  return MakeTensor(data, DataType::kInt64, std::move(shape));
}

}  // namespace overlap
