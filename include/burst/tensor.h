// burst/tensor.h — non-owning strided views and a small owning tensor.
//
// Owns: DType (the dtype seam: only F32 is computed today; BF16 and F64 are named so that
// signatures need not change when they arrive), TensorView (pointer + shape + strides in
// ELEMENTS, up to 4 dims, like DLPack without the device) and Tensor (owning, contiguous).
// Conventions: attention tensors are BSHD [B, S, H, D] (flash_attn) with D contiguous; SDPA's
// [B, H, S, D] memory is accepted by passing a BSHD-shaped view with permuted strides; varlen
// tensors are THD [total_tokens, H, D] with cu_seqlens. Does not: allocate for views, convert
// dtypes, or know about devices.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace burst {

enum class DType : std::uint8_t { F32, F64, BF16 };

/// Bytes per element of a dtype.
std::size_t dtype_size(DType dtype) noexcept;
const char* to_string(DType dtype) noexcept;

/// Non-owning view. shape/stride entries past ndim are ignored; strides are in elements.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;
  std::array<std::int64_t, 4> shape{};
  std::array<std::int64_t, 4> stride{};

  std::int64_t size(int dim) const { return shape[static_cast<std::size_t>(dim)]; }
  std::int64_t numel() const;
  bool is_contiguous() const;
  float* f32() const { return static_cast<float*>(data); }
  /// "[2,128,8,64] strides [65536,512,64,1] f32" — for error messages.
  std::string describe() const;
};

/// Contiguous row-major fp32 view over `data` with the given shape (1–4 dims).
/// Throws: Error(InvalidArgument) for ndim outside 1..4 or negative sizes.
TensorView make_view(float* data, std::vector<std::int64_t> shape);
TensorView make_view(const float* data, std::vector<std::int64_t> shape);

/// Owning contiguous fp32 tensor (zero-initialised). Cheap to move, copyable.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<std::int64_t> shape);
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const { return static_cast<std::int64_t>(data_.size()); }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::vector<float>& vec() { return data_; }
  const std::vector<float>& vec() const { return data_; }
  TensorView view() { return make_view(data_.data(), shape_); }
  TensorView view() const { return make_view(data_.data(), shape_); }

 private:
  std::vector<std::int64_t> shape_;
  std::vector<float> data_;
};

}  // namespace burst
