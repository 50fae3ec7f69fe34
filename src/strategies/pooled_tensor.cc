// Typed storage from a buffer pool (see pooled_tensor.h).
#include "strategies/pooled_tensor.h"

#include <utility>

namespace burst::strategies {

TensorView TypedTensor::view() const {
  return make_view(static_cast<const void*>(bytes_.data()), dtype_, shape_);
}

device::Buffer TypedTensor::release() {
  device::Buffer b = std::move(bytes_);
  shape_.clear();
  return b;
}

TypedTensor pooled_tensor(device::BufferPool& pool, std::vector<std::int64_t> shape, DType dtype) {
  std::int64_t n = 1;
  for (const std::int64_t x : shape) n *= x;
  TypedTensor t;
  t.bytes_ = pool.get(n * static_cast<std::int64_t>(dtype_size(dtype)));
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

}  // namespace burst::strategies
