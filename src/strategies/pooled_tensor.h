// src/strategies/pooled_tensor.h — owning typed storage from a device's buffer pool (internal).
#pragma once

#include <cstdint>
#include <vector>

#include "burst/tensor.h"
#include "device/device.h"

namespace burst::strategies {

class TypedTensor;
TypedTensor pooled_tensor(device::BufferPool& pool, std::vector<std::int64_t> shape, DType dtype);

/// Owning contiguous storage of `dtype` (f32, or bf16/f16 as their 16-bit patterns) in a
/// device's memory: burst::Tensor's twin for tensors a strategy keeps in their 16-bit dtype
/// (Ulysses' gathered and saved Q, K, V, dO) and for its fp32 scratch (delta, gathered rows).
/// Not copyable (views point into it); movable.
class TypedTensor {
 public:
  TypedTensor() = default;
  TypedTensor(TypedTensor&&) noexcept = default;
  TypedTensor& operator=(TypedTensor&&) noexcept = default;
  TypedTensor(const TypedTensor&) = delete;
  TypedTensor& operator=(const TypedTensor&) = delete;
  /// Contiguous view of the storage (device memory).
  TensorView view() const;
  bool empty() const { return shape_.empty(); }
  /// Hands the storage back (to a BufferPool with put); the tensor is empty afterwards.
  device::Buffer release();

 private:
  friend TypedTensor pooled_tensor(device::BufferPool& pool, std::vector<std::int64_t> shape, DType dtype);
  device::Buffer bytes_;
  std::vector<std::int64_t> shape_;
  DType dtype_ = DType::F32;
};

/// A TypedTensor of `shape` and `dtype` over a block of `pool` (the pool's device memory; no
/// zeroing: contents unspecified, the caller overwrites every element); give it back with
/// pool.put(t.release()).
TypedTensor pooled_tensor(device::BufferPool& pool, std::vector<std::int64_t> shape, DType dtype);

}  // namespace burst::strategies
