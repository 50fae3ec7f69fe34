// src/device/cuda/attention_cuda.h — the attention step kernels on one CUDA GPU (internal,
// library burst_cuda; docs/gpu.md § The step kernels): forward with the lse, backward given the
// lse and delta, any mask of burst/mask.h through the flat slice table, GQA without copies.
//
// Two implementations with one contract, that of the CPU kernels (src/kernels/kernels.h,
// attention_reference.cc): forward writes out [B,S_q,H,D] and lse [B,H,S_q] (fp32, natural log);
// a query row with no visible key gets out = 0 and lse = −inf. Backward, given lse and delta =
// rowsum(dout ∘ out) [B,H,S_q], writes (or, accumulate, adds into) dq [B,S_q,H,D] and dk, dv
// [B,S_kv,H_kv,D]; a row with lse = −inf contributes nothing. H_kv divides H (query head h reads
// KV head h / (H / H_kv)). Views are strided (strides in elements, D contiguous); all views on
// this GPU; q, k, v (and dout) of one dtype.
//   * The reference twin (attention_reference.cu): SIMT, fp32 math, one thread per row, any mask,
//     F32 / BF16 / F16 operands, any D ≤ 256. Slow and plainly right.
//   * The fast kernel (attention_fwd.cu, attention_bwd.cu): tiles of 64 queries × 64 keys on the
//     tensor cores (nvcuda::wmma, bf16 / fp16 operands, fp32 accumulation), online softmax over
//     the key tiles, tiles classified against the slice table: invisible tiles skipped, fully
//     visible ones unmasked. P and dS are rounded to the operand dtype before their products (as
//     every FlashAttention kernel does). D = 64 or 128, q/k/v BF16 or F16. fp32 operands are
//     refused to the reference (no tf32: its 10-bit mantissa would miss the fp32 contract).
//     Backward: one block per (b, KV head, key tile) keeps dK, dV in fp32 registers over the query
//     heads of its group and every query tile; dQ is added in fp32 with atomics (to dq itself
//     when fp32, else to an fp32 workspace rounded into dq at the end).
// Positions and the slice table (KernelArgs) may be in host memory or in this GPU's memory
// (cudaPointerGetAttributes decides): host arrays are copied to stream-ordered device memory
// per call (from pageable memory the driver stages them at the call and may wait for the stream
// to do so; pinned arrays are read when the stream reaches the copy, so they must stay unchanged
// until then), device ones are used as is (device.h's contract for a GPU).
// Everything is queued on `stream` (a stream of the views' GPU); nothing waits for it but those
// copies. Does not: validate user input beyond the contract (the callers checked it once).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "burst/mask.h"
#include "burst/tensor.h"
#include "kernels/kernels.h"

namespace burst::cuda {

/// Which kernel runs a step. Auto: the fast kernel where it supports the case, else the twin.
/// FastMma: the forward on mma.sync fragments held in registers (attention_fwd_mma.cu; same
/// cases and numerics as Fast; its backward is Fast's).
/// Cudnn: cuDNN's fused SDPA (attention_cudnn.h) where it takes the step — bf16 / fp16, a step
/// whose visibility is all keys or a causal diagonal — and Auto's choice elsewhere; needs a
/// CudnnState. Auto here is the static rule (Fast where it takes the step, else the twin);
/// device::CudaDevice chooses among Fast, FastMma and Cudnn by measured speed (cuda_device.h).
enum class StepKernel : std::uint8_t { Auto, Reference, Fast, FastMma, Cudnn };

class CudnnState;

/// Why the fast kernel does not take this problem, or "" when it does. q [B,S_q,H,D]; k, v
/// [B,S_kv,H_kv,D] (their dtypes and D decide; dout, when given, must match q's dtype); B and H
/// at most 65535 (its grid's y and z); q's GPU of compute capability 8.0 or newer whose opt-in
/// shared memory per block holds the forward's block (the backward's, when dout is given).
std::string fast_unsupported(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView* dout = nullptr);

/// The forward step: out [B,S_q,H,D] (F32 / BF16 / F16, rounded once), lse [B,H,S_q] fp32.
/// q, k, v as the header says; args: positions [S_q], [S_kv] strictly increasing, scale > 0, the
/// slice table (block_q / block_kv are ignored: the fast kernel's tiles are fixed).
/// Throws: Error(Unsupported) for `which` = Fast on a problem fast_unsupported names, or D > 256
/// for the twin; Error(Internal) when CUDA fails, or for Cudnn without `cudnn` (a state of q's
/// GPU). Cost (fast): 4·B·H·D·(visible pairs) flops.
void step_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                  const TensorView& lse, const kernels::KernelArgs& args, cudaStream_t stream,
                  StepKernel which = StepKernel::Auto, CudnnState* cudnn = nullptr);

/// The backward step: dq like q, dk, dv like k (F32 / BF16 / F16; accumulate: F32 only, added
/// into), from dout like q, lse and delta [B,H,S_q] fp32. Throws: as step_forward. Extra memory
/// (fast, dq not fp32): an fp32 copy of dq's shape, stream-ordered, freed on the stream.
/// Cudnn: cuDNN reads O instead of delta — `out` (the global out [B,S_q,H,D] that delta came
/// from) when given in q's dtype, else a stand-in made from dout and delta (attention_cudnn.h).
void step_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& lse, const TensorView& delta, const TensorView& dq, const TensorView& dk,
                   const TensorView& dv, const kernels::KernelArgs& args, bool accumulate,
                   cudaStream_t stream, StepKernel which = StepKernel::Auto, CudnnState* cudnn = nullptr,
                   const TensorView* out = nullptr);

/// One timed kernel case (bench_step_kernels): shapes, dtype, mask, which kernel, repetitions.
struct StepBenchCase {
  std::int64_t B = 1, S = 4096, H = 8, H_kv = 8, D = 64;
  DType dtype = DType::BF16;
  Mask mask;  ///< over [0, S)²
  StepKernel kernel = StepKernel::Auto;
  int warmup = 2, reps = 10;
  int device = 0;
};
/// What bench_step_kernels measured: GPU time from CUDA events (median of reps, milliseconds)
/// and TFLOP/s with burst's formula (forward 4·B·H·D·visible pairs, backward 2.5× that).
struct StepBenchResult {
  std::string gpu;              ///< the device's name (cudaGetDeviceProperties)
  std::string kernel;           ///< "fast", "fast_mma", "cudnn" or "reference" (what ran the forward)
  std::string backward_kernel;  ///< what ran the backward
  std::string choices;          ///< Auto's timed choices (CudaDevice::choice_timings), or ""
  std::int64_t visible_pairs = 0;
  double forward_ms = 0, backward_ms = 0, forward_tflops = 0, backward_tflops = 0;
};
/// Times step_forward and step_backward on random inputs (seeded) on GPU `device`, through a
/// device::CudaDevice whose Options::kernel is c.kernel (Auto: the measured choice, made in a
/// warm-up run): the hook behind cuda_step_bench. Allocates its own tensors (freed on return).
/// Throws: Error(Internal) without a usable GPU; as step_forward otherwise.
StepBenchResult bench_step_kernels(const StepBenchCase& c);

}  // namespace burst::cuda
