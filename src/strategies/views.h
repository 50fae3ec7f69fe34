// src/strategies/views.h — view arithmetic the strategies share (internal): no memory is read
// or written here (that is the device's, src/device/device.h).
#pragma once

#include <cstdint>
#include <vector>

#include "burst/tensor.h"

namespace burst::strategies {

/// Bytes of one fp32 value (partials, accumulators and row vectors are fp32).
constexpr std::int64_t kF32 = 4;

/// Elements [begin, end) of dimension `dim` of `t` (same strides, data moved to element begin).
/// Throws Error(Internal) for a range outside the dimension.
TensorView narrow(const TensorView& t, int dim, std::int64_t begin, std::int64_t end);
/// Contiguous BSHD view [B, S, H, D] over `data`.
TensorView bshd_view(const float* data, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D);
/// Contiguous row view [B, H, S] over `data`.
TensorView rows_view(const float* data, std::int64_t B, std::int64_t H, std::int64_t S);
/// The shape of `t` as a vector (t.ndim entries).
std::vector<std::int64_t> shape_of(const TensorView& t);

}  // namespace burst::strategies
