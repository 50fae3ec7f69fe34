// src/device/cuda/attention_cudnn.h — the attention step on cuDNN's fused SDPA, through the
// cuDNN frontend's graph API (internal, library burst_cuda; docs/gpu.md § cuDNN).
//
// Owns: CudnnState, a cuDNN handle on one GPU and the graphs built for it, cached by shape,
// dtype, strides, mask and scale (a graph's build costs milliseconds to seconds: once per key);
// the 128 most recently used are kept (device/lru_cache.h).
// The backend is compiled only where the frontend's headers were found (CMake:
// BURST_CUDNN_FRONTEND_DIR); elsewhere a CudnnState holds nothing, cudnn_unsupported says why,
// and StepKernel::Cudnn runs the own kernels.
// Forward: cuDNN's SDPA with its stats, which are burst's lse (natural log of Σ exp(τ·s) over the
// visible keys, fp32, [B,H,S_q] seen as [B,H,S_q,1]). Backward: cuDNN's SDPA backward from q,
// k, v, the GLOBAL out, dout and the global lse; cuDNN forms delta = rowsum(dout ∘ out) itself,
// which is burst's delta when `out` is the out that delta came from. dq, dk, dv come out of cuDNN
// in the operand dtype (bf16 / fp16): into fp32 targets, or when accumulating, they go through a
// 16-bit stream-ordered buffer and are widened (and added) afterwards — one rounding to the
// operand dtype that the fp32 paths of the own kernels do not have.
// Views: BSHD with D contiguous and any other strides (cuDNN's [B,H,S,D] dims over the same
// memory); GQA (H_kv divides H). Masks: only what classify_for_cudnn (cudnn_mask.h) matches.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "burst/tensor.h"
#include "device/cuda/cudnn_mask.h"
#include "kernels/kernels.h"

namespace burst::cuda {

/// True when burst_cuda was built with the cuDNN frontend headers.
bool cudnn_compiled() noexcept;

/// A cuDNN handle on GPU `device` and its cache of built graphs. Not thread-safe: one per
/// device and user of the device's stream (a CudaDevice's or a test's). Created on demand.
class CudnnState {
 public:
  /// Throws: Error(Internal) when cudnnCreate fails (no cuDNN library, no GPU); built without
  /// the frontend, nothing (the state is empty).
  explicit CudnnState(int device);
  ~CudnnState();
  CudnnState(const CudnnState&) = delete;
  CudnnState& operator=(const CudnnState&) = delete;

  int device() const noexcept { return device_; }
  /// Graphs executed (forward and backward) and graphs built (refused ones included), since
  /// construction: a test reads these to know that cuDNN ran and that the cache took the
  /// repeated keys.
  std::int64_t executed() const noexcept;
  std::int64_t built() const noexcept;
  /// Why cuDNN refused the last graph it refused (the frontend's stage and message), "" when it
  /// refused none: benchmark records carry it, so a step that ran on the own kernels says why.
  std::string last_refusal() const;
  /// Test hook: graphs of more than n KV heads are refused as cuDNN would refuse an oversized
  /// one (0: none), so the split into head halves runs on any GPU.
  void plant_refusal_above_kv_heads(std::int64_t n);
  /// Test hook: keep at most n > 0 built graphs (default 128), the least recently used evicted
  /// (after the device finished their kernels); graphs evicted since construction.
  void set_graph_capacity(std::size_t n);
  std::int64_t evicted() const noexcept;
  /// The steps' mask verdicts, cached by contents (cudnn_mask.h): what cudnn_unsupported asks.
  CudnnMaskCache& masks() noexcept { return masks_; }

  struct Impl;  // the handle and the cache (attention_cudnn.cc)
  Impl& impl() noexcept { return *impl_; }

 private:
  int device_;
  std::unique_ptr<Impl> impl_;
  CudnnMaskCache masks_;
};

/// Why cuDNN does not take this step, or "" when it does (as far as the host can tell: a graph
/// cuDNN refuses when built is reported by cudnn_step_forward / _backward returning false).
/// q [B,S_q,H,D], k, v [B,S_kv,H_kv,D]: BF16 or F16, one dtype (and dout's, out's when given for
/// the backward: out may be any dtype, converted to q's first); pointers 16-byte aligned; the
/// mask one of cudnn_mask.h's, classified from the host arrays: args.host_* where given, else
/// the positions and slice table themselves when they are host memory, else copies of them
/// (a copy from device memory waits for the stream). `mask` receives the verdict (its kind None
/// whenever the answer is not ""); `masks`, when given, remembers verdicts by contents (a ring's
/// repeated blocks are classified once).
std::string cudnn_unsupported(const TensorView& q, const TensorView& k, const TensorView& v,
                              const kernels::KernelArgs& args, cudaStream_t stream, CudnnMaskVerdict* mask,
                              const TensorView* dout = nullptr, CudnnMaskCache* masks = nullptr);

/// Why cuDNN's SDPA backward must not take a step of S_kv keys on a GPU of compute capability
/// major `sm_major` with the cuDNN library numbered `cudnn_version` (cudnnGetVersion: 91900 is
/// 9.19), or "" when it may. cuDNN's SM90 backward before 9.26 walks the keys in 128-row tiles
/// but masks the padded tail at 64-row granularity, so for S_kv ≡ 64 (mod 128) the zero-filled
/// tail enters exp(0 − lse) unmasked: dQ becomes NaN in every row whose lse is below
/// −ln(FLT_MAX) ≈ −88.7 (possible for a ring step's rows, whose lse is the global one: every
/// scaled score far below zero). Fixed in 9.26 (the cuDNN frontend's regression test for rows
/// of very negative lse). Such steps run on the own kernels. Host only, not collective; never
/// throws.
std::string cudnn_backward_defect(int sm_major, std::int64_t cudnn_version, std::int64_t S_kv);

/// The loaded cuDNN library's number (cudnnGetVersion: 91900 is 9.19); 0 when burst_cuda was
/// built without the frontend. Host only, not collective; never throws.
std::int64_t cudnn_library_version() noexcept;

/// True when lse rows t [B,H,S_q] (fp32, 3 dims) are packed exactly as the cuDNN frontend
/// checks a Stats tensor [B,H,S_q,1] before giving it to cuDNN directly: strides (H·S_q, S_q, 1),
/// a dimension of size 1 included (the frontend compares the declared strides, not the addresses
/// they reach, and refuses other layouts: a backward's Stats before cuDNN 9.26, a forward's
/// before 9.12). So a head half [1,H/2,S_q] of a packed [1,H,S_q] is not packed here, nor a
/// span [1,1,n] of a [1,1,S_q]. Where false, the steps give cuDNN a packed copy.
bool cudnn_stats_packed(const TensorView& t) noexcept;

/// The forward step on cuDNN (the contract of attention_cuda.h's step_forward; out of any dtype,
/// through a q-dtype buffer when it is not q's). A step whose graph cuDNN refuses is tried as
/// two halves of its KV heads (each with its query heads; the mask is every head's), and so on
/// down to one KV head: cuDNN's limits on one graph's size (the backward's fp32 dQ accumulator
/// holds B·H·S_q·D values) then hold for long steps; the halves share one graph. Returns false
/// when cuDNN refuses the step at every split (the caller runs its own kernel over the whole
/// step): having queued nothing, or, where a rebuild of a second half's evicted graph failed
/// after the first half ran, having written results the caller's kernel rewrites (an
/// accumulating backward throws Error(Internal) there instead). lse may be any view of fp32
/// rows: where it is not packed [B,H,S_q] (a step's rows of a wider lse) cuDNN writes a packed
/// buffer, copied into it afterwards. Throws: Error(Internal) when a cuDNN or CUDA call fails
/// otherwise.
bool cudnn_step_forward(CudnnState& state, const CudnnMaskVerdict& mask, const TensorView& q,
                        const TensorView& k, const TensorView& v, const TensorView& out,
                        const TensorView& lse, float scale, cudaStream_t stream);

/// The backward step on cuDNN: step_backward's contract. cuDNN reads O (and forms delta =
/// rowsum(dO ∘ O) itself), not delta: `out`, when given, is the global out that delta came from,
/// read directly when it is in q's dtype (else converted to it); without `out`, or when it
/// would need a conversion anyway, a stand-in O' with rowsum(dO ∘ O') = delta is made from dout
/// and delta (synthesize_out, elementwise.h; device/out_synth.h bounds its error by that of the
/// real out rounded to the dtype). lse may be any view of fp32 rows (a step's span of a wider
/// lse): cuDNN reads a packed copy when it is not packed [B,H,S_q]. Keys no row sees (a band's
/// keys outside every row's range) get zero dK, dV, written after cuDNN ran. Returns false as
/// the forward. Extra memory: the 16-bit gradients that are not written in place, the q-dtype O',
/// and the packed lse.
bool cudnn_step_backward(CudnnState& state, const CudnnMaskVerdict& mask, const TensorView& dout,
                         const TensorView& q, const TensorView& k, const TensorView& v, const TensorView* out,
                         const TensorView& lse, const TensorView& delta, const TensorView& dq,
                         const TensorView& dk, const TensorView& dv, float scale, bool accumulate,
                         cudaStream_t stream);

}  // namespace burst::cuda
