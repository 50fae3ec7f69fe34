// src/strategies/pooled_tensor.h — owning typed storage from a device's buffer pool (internal).
#pragma once

#include <cstdint>
#include <vector>

#include "burst/comm.h"
#include "burst/tensor.h"
#include "device/device.h"

namespace burst::strategies {

class TypedTensor;
TypedTensor pooled_tensor(device::BufferPool& pool, std::vector<std::int64_t> shape, DType dtype);

/// Owning contiguous storage of `dtype` (f32, or bf16/f16 as their 16-bit patterns),
/// zero-initialised: burst::Tensor's twin for inputs a strategy keeps in their 16-bit dtype
/// (Ulysses' gathered and saved Q, K, V, dO). Host memory. Not copyable (views point into it);
/// movable.
class TypedTensor {
 public:
  TypedTensor() = default;
  TypedTensor(std::vector<std::int64_t> shape, DType dtype);
  TypedTensor(TypedTensor&&) noexcept = default;
  TypedTensor& operator=(TypedTensor&&) noexcept = default;
  TypedTensor(const TypedTensor&) = delete;
  TypedTensor& operator=(const TypedTensor&) = delete;
  TensorView view() const;
  bool empty() const { return shape_.empty(); }
  /// Hands the storage back (e.g. to a BufferPool with put_host); the tensor is empty afterwards.
  ByteBuffer release();

 private:
  friend TypedTensor pooled_tensor(device::BufferPool& pool, std::vector<std::int64_t> shape, DType dtype);
  ByteBuffer bytes_;
  std::vector<std::int64_t> shape_;
  DType dtype_ = DType::F32;
};

/// A TypedTensor over a block of `pool` (no zeroing: contents unspecified, the caller
/// overwrites every element); give it back with pool.put_host(t.release()). Precondition: the
/// pool's memory is host memory (BufferPool::get_host).
TypedTensor pooled_tensor(device::BufferPool& pool, std::vector<std::int64_t> shape, DType dtype);

}  // namespace burst::strategies
