// src/device/cuda/attention_tiles.cuh — what the fast forward and backward kernels share
// (internal to burst_cuda): tile sizes and shared-memory strides, 16-bit operand types for
// nvcuda::wmma, tile loads into shared memory, and the block-wide mask machinery — the slice
// table filtered once per block to the slices that can meet its rows (forward) or keys
// (backward), then each tile pair classified against that list (mask_table.h): Empty tiles are
// skipped, Full ones computed without asking the mask per element.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "burst/error.h"

#include "device/cuda/attention_device.cuh"

namespace burst::cuda::tiles {

constexpr int kBq = 64;    ///< query rows per tile
constexpr int kBkv = 64;   ///< key rows per tile
constexpr int kWarps = 4;  ///< each warp owns 16 rows of a 64-row tile
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxSlices = 64;  ///< slices kept in shared memory per block; more → read the global table
static_assert(kBq == 16 * kWarps && kBkv == 16 * kWarps, "one 16-row wmma strip per warp");

/// Shared-memory row strides (elements): padded against bank conflicts, multiples of 8 halves /
/// 4 floats (wmma's ldm rule) so that every 16-row strip starts 32-byte aligned.
template <int D>
struct Strides {
  static constexpr int op = D + 8;        ///< 16-bit operand tiles (Q, K, V, dO)
  static constexpr int score = kBkv + 4;  ///< fp32 score tiles (S, dP)
  static constexpr int prob = kBkv + 8;   ///< 16-bit P, dS
  static constexpr int acc = D + 4;       ///< fp32 row accumulators (O, dQ, dK, dV staging)
};

/// The 16-bit operand type of a dtype, and fp32 → it rounded to nearest even.
template <typename T>
__device__ __forceinline__ T to_op(float x);
template <>
__device__ __forceinline__ __half to_op<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 to_op<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

/// dst[r·ld + d] ← row s0 + r of head h of src (16-bit), for r < rows; rows ≥ valid are zero.
/// vec: 16-byte loads (the host checked the alignment of data and strides), else 2-byte ones.
template <typename T, int D>
__device__ void load_tile(T* dst, int ld, const BshdArg& src, std::int64_t b, std::int64_t s0, std::int64_t h,
                          int rows, int valid, bool vec) {
  constexpr int kChunks = D / 8;
  for (int idx = static_cast<int>(threadIdx.x); idx < rows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    union {
      uint4 v;
      std::uint16_t bits[8];
    } u;
    u.v = make_uint4(0, 0, 0, 0);
    if (r < valid) {
      const std::uint16_t* p =
          static_cast<const std::uint16_t*>(src.data) + row_offset(src, b, s0 + r, h) + c;
      if (vec) {
        u.v = *reinterpret_cast<const uint4*>(p);
      } else {
        for (int e = 0; e < 8; ++e) u.bits[e] = p[e];
      }
    }
    *reinterpret_cast<uint4*>(dst + r * ld + c) = u.v;
  }
}

/// The slices a block works with: those of the table that can meet its rows (or keys), in
/// shared memory when at most kMaxSlices, else the whole global table.
struct SliceList {
  SliceBounds local[kMaxSlices];
  int count;        ///< slices that met (may exceed kMaxSlices)
  bool use_global;  ///< count > kMaxSlices: ask the global table
};

/// Fills `list` (shared) with the slices meeting positions [lo, hi] of the rows (rows = true)
/// or of the keys. Block-wide; ends with __syncthreads.
__device__ inline void filter_slices(SliceList& list, const StepArgs& s, bool rows, std::int64_t lo,
                                     std::int64_t hi) {
  if (threadIdx.x == 0) list.count = 0;
  __syncthreads();
  for (std::int64_t i = threadIdx.x; i < s.slice_count; i += kThreads) {
    const SliceBounds b = slice_bounds(s.slices[i]);
    if (rows ? slice_meets_rows(b, lo, hi) : slice_meets_cols(b, lo, hi)) {
      const int at = atomicAdd(&list.count, 1);
      if (at < kMaxSlices) list.local[at] = b;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) list.use_global = list.count > kMaxSlices;
  __syncthreads();
}

__device__ __forceinline__ SliceBounds slice_at(const SliceList& list, const StepArgs& s, std::int64_t i) {
  return list.use_global ? slice_bounds(s.slices[i]) : list.local[i];
}
__device__ __forceinline__ std::int64_t slice_count(const SliceList& list, const StepArgs& s) {
  return list.use_global ? s.slice_count : list.count;
}

/// The union's verdict on hulls [q_lo, q_hi] × [k_lo, k_hi]; block-wide (every thread of the
/// block calls it with the same arguments and gets the same answer).
__device__ inline TileClass classify_tile(const SliceList& list, const StepArgs& s, std::int64_t q_lo,
                                          std::int64_t q_hi, std::int64_t k_lo, std::int64_t k_hi) {
  bool any = false, full = false;
  const std::int64_t n = slice_count(list, s);
  for (std::int64_t i = threadIdx.x; i < n; i += kThreads) {
    const TileClass c = slice_classify(slice_at(list, s, i), q_lo, q_hi, k_lo, k_hi);
    any = any || c != TileClass::Empty;
    full = full || c == TileClass::Full;
  }
  full = __syncthreads_or(full) != 0;
  any = __syncthreads_or(any) != 0;
  return full ? TileClass::Full : (any ? TileClass::Partial : TileClass::Empty);
}

/// Visibility of (q, k) under the list (per element, in Partial tiles).
__device__ __forceinline__ bool list_visible(const SliceList& list, const StepArgs& s, std::int64_t q,
                                             std::int64_t k) {
  const std::int64_t n = slice_count(list, s);
  for (std::int64_t i = 0; i < n; ++i)
    if (slice_visible(slice_at(list, s, i), q, k)) return true;
  return false;
}

/// True when 16-byte vector loads of t's rows are aligned: its data, and every stride in
/// elements a multiple of 8 (16 bytes of a 16-bit dtype).
inline bool aligned16(const BshdArg& t) {
  return reinterpret_cast<std::uintptr_t>(t.data) % 16 == 0 && t.sb % 8 == 0 && t.ss % 8 == 0 &&
         t.sh % 8 == 0;
}

/// The grid of a tiled kernel: one block per `tile` rows of `rows` (x), per head (y), per batch (z).
inline dim3 tile_grid(std::int64_t rows, int tile, std::int64_t heads, std::int64_t B) {
  return dim3(static_cast<unsigned>((rows + tile - 1) / tile), static_cast<unsigned>(heads),
              static_cast<unsigned>(B));
}

/// Bytes of the shared-memory layout Smem<D> for the head dim D (64 or 128; the callers checked).
template <template <int> class Smem>
std::size_t smem_bytes_for(std::int64_t D) {
  return D == 64 ? Smem<64>::bytes : Smem<128>::bytes;
}

/// The body of a tiled kernel compiled for a device older than compute capability 8.0: the
/// host dispatches there only on 8.0 or newer, so reaching it is a bug and the kernel traps.
__device__ __forceinline__ void trap_below_sm80() {
#if defined(__CUDA_ARCH__)
  __trap();
#endif
}

/// Launches kernel<<<grid, kThreads, bytes, stream>>>(args, vec) after raising its dynamic
/// shared-memory limit to `bytes`; Error(Internal) naming `what` when the GPU refuses either.
template <typename Args>
void launch_tiles(void (*kernel)(Args, bool), int bytes, dim3 grid, const Args& args, bool vec,
                  cudaStream_t stream, const char* what) {
  const cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  BURST_CHECK(status == cudaSuccess, Internal, what, ": ", bytes,
              " bytes of shared memory refused: ", cudaGetErrorString(status));
  kernel<<<grid, kThreads, static_cast<std::size_t>(bytes), stream>>>(args, vec);
  check_launch(what);
}

/// Calls launch.template operator()<T, D>() for the 16-bit operand type T of `dtype` (bf16 or
/// fp16) and the head dim D (64 or 128; the callers checked).
template <typename Launch>
void dispatch_tiles(DType dtype, std::int64_t D, const Launch& launch) {
  if (D == 64) {
    dtype == DType::BF16 ? launch.template operator()<__nv_bfloat16, 64>()
                         : launch.template operator()<__half, 64>();
  } else {
    dtype == DType::BF16 ? launch.template operator()<__nv_bfloat16, 128>()
                         : launch.template operator()<__half, 128>();
  }
}

}  // namespace burst::cuda::tiles
