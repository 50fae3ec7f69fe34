#include "burst/tensor.h"

#include <sstream>

#include "burst/error.h"

namespace burst {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::F16: return 2;
  }
  return 0;
}

const char* to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "f32" || name == "float32") return DType::F32;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "fp16" || name == "f16" || name == "float16") return DType::F16;
  if (name == "fp64" || name == "f64" || name == "float64") return DType::F64;
  BURST_FAIL(InvalidArgument, "unknown dtype '", name, "': expected fp32, bf16, fp16 or fp64");
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
  BURST_CHECK(!shape.empty() && shape.size() <= 4, InvalidArgument, "tensor rank must be 1..4, got ",
              shape.size());
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

TensorView make_view(const void* data, DType dtype, std::vector<std::int64_t> shape) {
  TensorView v = make_view(static_cast<const float*>(data), std::move(shape));
  v.dtype = dtype;
  return v;
}

namespace {

double load(const TensorView& t, std::int64_t off) {
  const char* base = static_cast<const char*>(t.data);
  switch (t.dtype) {
    case DType::F32: return reinterpret_cast<const float*>(base)[off];
    case DType::F64: return reinterpret_cast<const double*>(base)[off];
    case DType::BF16: return bf16_to_float(reinterpret_cast<const std::uint16_t*>(base)[off]);
    case DType::F16: return f16_to_float(reinterpret_cast<const std::uint16_t*>(base)[off]);
  }
  return 0;
}

void store(const TensorView& t, std::int64_t off, double x) {
  char* base = static_cast<char*>(t.data);
  const auto f = static_cast<float>(x);
  switch (t.dtype) {
    case DType::F32: reinterpret_cast<float*>(base)[off] = f; break;
    case DType::F64: reinterpret_cast<double*>(base)[off] = x; break;
    case DType::BF16: reinterpret_cast<std::uint16_t*>(base)[off] = bf16_from_float(f); break;
    case DType::F16: reinterpret_cast<std::uint16_t*>(base)[off] = f16_from_float(f); break;
  }
}

}  // namespace

void convert(const TensorView& src, const TensorView& dst) {
  check_device("convert", kHost, "src", src, "dst", dst);
  bool same = src.ndim == dst.ndim;
  for (int i = 0; same && i < src.ndim; ++i) same = src.size(i) == dst.size(i);
  BURST_CHECK(same, InvalidArgument, "convert: shapes differ: src ", src.describe(), ", dst ",
              dst.describe());
  const std::int64_t n = src.numel();
  std::array<std::int64_t, 4> idx{};
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t so = 0, d_off = 0;
    for (int i = 0; i < src.ndim; ++i) {
      const auto u = static_cast<std::size_t>(i);
      so += idx[u] * src.stride[u];
      d_off += idx[u] * dst.stride[u];
    }
    store(dst, d_off, load(src, so));
    for (int i = src.ndim - 1; i >= 0; --i) {  // odometer increment
      const auto u = static_cast<std::size_t>(i);
      if (++idx[u] < src.shape[u]) break;
      idx[u] = 0;
    }
  }
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
