// src/device/cuda/elementwise.h — the CUDA twins of the strategies' elementwise memory work
// (internal, library burst_cuda; docs/gpu.md): strided copy with dtype conversion (which is also
// pack, unpack and rounding to and from the wire dtype), fill, add, the online-softmax merge
// (form B) and delta = rowsum(dO ∘ O). llm.c keeps its CPU and CUDA twins side by side; so do we:
// each function names its CPU twin, the oracle tests/test_cuda_elementwise.cc compares it with.
// Each is a host-callable launch wrapper over TensorViews (pointer, shape, strides in elements)
// on ONE CUDA device: it validates on the host (errors as its CPU twin's, before any CUDA call),
// makes that device current for the launch, and returns without waiting: the work is queued on
// `stream` (a stream of that device; 0 = its legacy default stream). Inputs must not be modified
// and outputs not read until the stream reaches it. The kernels trust the validated views.
// Does not: allocate, synchronise, or move memory between host and device.
#pragma once

#include <cuda_runtime_api.h>

#include "burst/tensor.h"

namespace burst::cuda {

/// dst ← src, element by element with dtype conversion: the twin of burst::convert (same bits:
/// F64 is rounded to fp32 first, narrowing rounds to nearest even by the scalar rules of
/// burst/tensor.h). Packing is a copy from a strided view into a contiguous one, unpacking the
/// reverse. Shapes: src and dst the same, 1–4 dims, any strides; dtypes F32, F64, BF16, F16 in
/// any pair. Throws: Error(InvalidArgument) on a shape mismatch or operands not on one CUDA
/// device; Error(Internal) when the launch fails. Cost: one read and one write per element.
void copy(const TensorView& src, const TensorView& dst, cudaStream_t stream);

/// Index copy along dimension `dim` in one launch, the twin of CpuDevice::index_copy
/// (src/device/cpu/cpu_device.cc) with an index: scatter false, dst[.., i, ..] ← src[.., index[i],
/// ..] for i < dst.shape[dim] (a gather); scatter true, dst[.., index[i], ..] ← src[.., i, ..] for
/// i < src.shape[dim]; accumulate (fp32 only): += instead of ←. `index` is DEVICE memory of this
/// GPU (n = the walked side's dim entries, each in [0, the other side's dim)); scatter with
/// accumulate needs distinct entries (the strategies' rows are). src and dst: same dtype, same
/// ndim (1–4), the other dims equal, any strides. Elements move bit for bit (no conversion).
/// Throws: Error(InvalidArgument) on shapes or devices, Error(Unsupported) for accumulate into a
/// dtype other than fp32, Error(Internal) on launch failure. Cost: one read and one write per
/// element of the walked side, one launch.
void index_copy(const TensorView& src, const TensorView& dst, int dim, const std::int64_t* index,
                bool scatter, bool accumulate, cudaStream_t stream);

/// Every element of dst ← value rounded to dst's dtype (the twin of CpuDevice::fill in
/// src/device/cpu/cpu_device.cc). dst: 1–4 dims, any strides, any dtype.
/// Throws: Error(InvalidArgument) for dst not on a CUDA device; Error(Internal) on launch failure.
void fill(const TensorView& dst, float value, cudaStream_t stream);

/// dst ← dst + src in fp32, element by element (one rounding: the twin of the strategies' fp32
/// accumulation of dK, dV partials). dst fp32, src F32 / BF16 / F16 (widened exactly), same
/// shape, 1–4 dims, any strides. Throws: as copy, and Error(Unsupported) for dst not fp32.
void add(const TensorView& dst, const TensorView& src, cudaStream_t stream);

/// Merges a partial (out_part, lse_part) into (out, lse) in place, row by row: the twin of
/// burst::merge_forward (burst/softmax_merge.h), with the same merge_weights function. Shapes:
/// out, out_part [B, S, H, D] fp32 with D contiguous; lse, lse_part [B, H, S] fp32, natural log,
/// any strides. A side whose lse is −inf is not read (it may hold NaN); both −inf keeps out, lse
/// = −inf. Equal to the CPU twin up to the ulps of the device's expf / log1pf (the products and
/// sums round as the CPU's: no contraction). Throws: Error(InvalidArgument) on shapes or
/// devices, Error(Unsupported) for a dtype other than fp32, Error(Internal) on launch failure.
void merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                   const TensorView& lse_part, cudaStream_t stream);

/// delta[b, h, s] ← Σ_d dO[b, s, h, d] · O[b, s, h, d] in fp32, summed in order of d with each
/// product and sum rounded (bit for bit burst::attention_delta, burst/attention.h). Shapes: dout,
/// out [B, S, H, D] (or varlen [T, H, D]) F32 / BF16 / F16, D contiguous; delta [B, H, S] (varlen
/// [H, T]) fp32, any strides. Throws: as merge_forward. Cost: one thread per row.
void attention_delta(const TensorView& dout, const TensorView& out, const TensorView& delta,
                     cudaStream_t stream);

/// out ← the stand-in O' of device/out_synth.h, row by row: O'_d = sign(dO_d) · delta / ‖dO‖₁
/// rounded once to out's dtype, so that rowsum(dO ∘ O') = delta within out_synth_delta_bound (what
/// cuDNN's SDPA backward, which reads O only to form that rowsum, needs where a step has delta
/// but not the global out). dout, out [B,S,H,D] F32 / BF16 / F16, D contiguous, same shape;
/// delta [B,H,S] fp32, any strides. Bit for bit the host twin (out_synth.h's functions).
/// Throws: as attention_delta. Cost: one thread per row, two reads of dout, one write of out.
void synthesize_out(const TensorView& dout, const TensorView& delta, const TensorView& out,
                    cudaStream_t stream);

/// *first ← the smallest row-major index (over t's shape) of an element of t whose exponent
/// bits are all ones (NaN or ±inf), or −1 when every element is finite: the twin of
/// CpuDevice::first_nonfinite (src/device/cpu/cpu_device.cc), bits only. t: F32, BF16 or F16,
/// 1–4 dims, any strides; `first`: one int64 of this GPU's memory, not read before. Enqueued (a
/// memset and one launch; each warp folds its lanes' first hits into *first with one atomic
/// minimum). Throws: Error(InvalidArgument) on shapes or devices, Error(Unsupported) for
/// another dtype, Error(Internal) on launch failure. Cost: one read per element.
void first_nonfinite(const TensorView& t, std::int64_t* first, cudaStream_t stream);

}  // namespace burst::cuda
