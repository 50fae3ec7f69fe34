// src/device/cuda/attention_device.cuh — device helpers shared by the attention step kernels
// (internal to burst_cuda): element loads and stores with the dtype rules of burst/tensor.h
// (widening exact, narrowing once, round to nearest even), row offsets of the plain views, and
// the launch check.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "burst/error.h"
#include "burst/tensor.h"
#include "device/cuda/attention_launch.h"
#include "device/cuda/mask_table.h"

namespace burst::cuda {

/// Offset in elements of row (b, s, h) of a BSHD operand.
__device__ __forceinline__ std::int64_t row_offset(const BshdArg& t, std::int64_t b, std::int64_t s,
                                                   std::int64_t h) {
  return b * t.sb + s * t.ss + h * t.sh;
}
__device__ __forceinline__ float& row_at(const RowArg& r, std::int64_t b, std::int64_t h, std::int64_t s) {
  return r.data[b * r.sb + h * r.sh + s * r.ss];
}

/// Element `off` of t widened to fp32 (exact).
__device__ __forceinline__ float load_elem(const BshdArg& t, std::int64_t off) {
  switch (t.dtype) {
    case DType::BF16: return bf16_to_float(static_cast<const std::uint16_t*>(t.data)[off]);
    case DType::F16: return f16_to_float(static_cast<const std::uint16_t*>(t.data)[off]);
    case DType::F64: return static_cast<float>(static_cast<const double*>(t.data)[off]);
    case DType::F32: break;
  }
  return static_cast<const float*>(t.data)[off];
}

/// Element `off` of t ← x rounded once to t's dtype; accumulate (fp32 only): t += x.
__device__ __forceinline__ void store_elem(const BshdArg& t, std::int64_t off, float x, bool accumulate) {
  switch (t.dtype) {
    case DType::BF16: static_cast<std::uint16_t*>(t.data)[off] = bf16_from_float(x); return;
    case DType::F16: static_cast<std::uint16_t*>(t.data)[off] = f16_from_float(x); return;
    case DType::F64: static_cast<double*>(t.data)[off] = x; return;
    case DType::F32: break;
  }
  float* p = static_cast<float*>(t.data) + off;
  *p = accumulate ? *p + x : x;
}

/// The end of an online-softmax row with running max m and sum l: out = o / l and
/// lse = m + log l (natural log); when no key was visible (l = 0), out = 0 and lse = −∞ (the
/// flash_attn convention, never NaN).
__device__ __forceinline__ float normalized_out(float o, float l) { return l == 0.0f ? 0.0f : o / l; }
__device__ __forceinline__ float row_lse(float m, float l) { return l == 0.0f ? -INFINITY : m + logf(l); }

/// Visibility of (q, k) under the first n slices of a table (global or shared memory).
__device__ __forceinline__ bool visible_in(const SliceBounds* bounds, int n, std::int64_t q, std::int64_t k) {
  for (int s = 0; s < n; ++s)
    if (slice_visible(bounds[s], q, k)) return true;
  return false;
}

/// Throws Error(Internal) naming `what` when the last launch failed.
inline void check_launch(const char* what) {
  const cudaError_t status = cudaGetLastError();
  BURST_CHECK(status == cudaSuccess, Internal, what, ": ", cudaGetErrorName(status), ": ",
              cudaGetErrorString(status));
}

}  // namespace burst::cuda
