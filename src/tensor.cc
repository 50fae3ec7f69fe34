#include "burst/tensor.h"

#include <sstream>

#include "burst/error.h"

namespace burst {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
  }
  return 0;
}

const char* to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
  }
  return "?";
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[static_cast<std::size_t>(i)];
  return n;
}

bool TensorView::is_contiguous() const {
  std::int64_t expect = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    if (shape[u] != 1 && stride[u] != expect) return false;
    expect *= shape[u];
  }
  return true;
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < ndim; ++i) os << (i ? "," : "") << shape[static_cast<std::size_t>(i)];
  os << "] strides [";
  for (int i = 0; i < ndim; ++i) os << (i ? "," : "") << stride[static_cast<std::size_t>(i)];
  os << "] " << to_string(dtype);
  return os.str();
}

TensorView make_view(float* data, std::vector<std::int64_t> shape) {
  BURST_CHECK(!shape.empty() && shape.size() <= 4, InvalidArgument,
              "tensor rank must be 1..4, got ", shape.size());
  TensorView v;
  v.data = data;
  v.dtype = DType::F32;
  v.ndim = static_cast<int>(shape.size());
  std::int64_t s = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    BURST_CHECK(shape[u] >= 0, InvalidArgument, "negative size ", shape[u], " in dim ", i);
    v.shape[u] = shape[u];
    v.stride[u] = s;
    s *= shape[u];
  }
  return v;
}

TensorView make_view(const float* data, std::vector<std::int64_t> shape) {
  // Views are non-owning and do not track constness; inputs are never written through.
  return make_view(const_cast<float*>(data), std::move(shape));
}

Tensor::Tensor(std::vector<std::int64_t> shape) : shape_(std::move(shape)) {
  std::int64_t n = 1;
  for (auto s : shape_) {
    BURST_CHECK(s >= 0, InvalidArgument, "negative tensor size ", s);
    n *= s;
  }
  data_.assign(static_cast<std::size_t>(n), 0.0f);
}

}  // namespace burst
