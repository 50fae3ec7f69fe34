// src/device/cuda/attention_launch.h — what the attention step kernels take by value, and their
// launchers (internal to burst_cuda: attention_cuda.cc dispatches to them; docs/gpu.md).
// Plain structs only (no host objects): views as pointer + strides in elements, positions and
// the slice table already in device memory. The launchers trust their arguments (checked by
// attention_cuda.cc) and queue on `stream` without waiting.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "burst/mask.h"
#include "burst/tensor.h"

namespace burst::cuda {

/// A [B, S, H, D] operand, D contiguous: element (b, s, h, d) at data[b·sb + s·ss + h·sh + d].
struct BshdArg {
  void* data = nullptr;
  std::int64_t sb = 0, ss = 0, sh = 0;
  DType dtype = DType::F32;
};
/// A [B, H, S] fp32 row operand (lse, delta): element (b, h, s) at data[b·sb + h·sh + s·ss].
struct RowArg {
  float* data = nullptr;
  std::int64_t sb = 0, sh = 0, ss = 1;
};

/// Shapes, scale and the mask of one step; the arrays are device memory.
struct StepArgs {
  std::int64_t B = 0, S_q = 0, S_kv = 0, H = 0, H_kv = 0, D = 0;
  float scale = 1.0f;
  const std::int64_t* q_pos = nullptr;   ///< [S_q]
  const std::int64_t* kv_pos = nullptr;  ///< [S_kv]
  const MaskSlice* slices = nullptr;     ///< [slice_count]
  std::int64_t slice_count = 0;
};

struct ForwardArgs {
  StepArgs s;
  BshdArg q, k, v, out;
  RowArg lse;
};

struct BackwardArgs {
  StepArgs s;
  BshdArg dout, q, k, v, dq, dk, dv;
  RowArg lse, delta;
  bool accumulate = false;  ///< add into dq, dk, dv (fp32) instead of overwriting
};

/// The reference twin (attention_reference.cu): any dtype, D ≤ 256.
void launch_reference_forward(const ForwardArgs& a, cudaStream_t stream);
void launch_reference_backward(const BackwardArgs& a, cudaStream_t stream);

/// The fast kernel (attention_fwd.cu): q, k, v BF16 or F16 (one dtype), D 64 or 128.
void launch_fast_forward(const ForwardArgs& a, cudaStream_t stream);
/// The register-resident forward (attention_fwd_mma.cu, mma.sync): as launch_fast_forward.
void launch_mma_forward(const ForwardArgs& a, cudaStream_t stream);
std::size_t mma_forward_smem_bytes(std::int64_t D);
/// The fast backward (attention_bwd.cu): as the forward; dq must be an fp32 view that the kernel
/// ADDS into with atomics (the caller zeroes it or lets it accumulate, and rounds it into the
/// user's dq); dk, dv are written (or added, accumulate) once per element.
void launch_fast_backward(const BackwardArgs& a, cudaStream_t stream);
/// Shared memory (bytes, static and dynamic) a block of the fast forward / backward takes at
/// head dim D (64 or 128): the GPU must allow that much per block.
std::size_t fast_forward_smem_bytes(std::int64_t D);
std::size_t fast_backward_smem_bytes(std::int64_t D);

}  // namespace burst::cuda
