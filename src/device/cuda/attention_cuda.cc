// The GPU step kernels' host side (attention_cuda.h): the views as plain kernel arguments,
// positions and the slice table in device memory, the choice between the fast kernel and its
// reference twin, and dQ's fp32 target for the fast backward.
#include "device/cuda/attention_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "burst/error.h"
#include "device/cuda/attention_cudnn.h"
#include "device/cuda/attention_launch.h"
#include "device/cuda/cuda_memory.h"
#include "device/cuda/elementwise.h"

namespace burst::cuda {
namespace {

BshdArg bshd(const TensorView& t) {
  BURST_CHECK(t.ndim == 4 && (t.stride[3] == 1 || t.shape[3] <= 1), Internal,
              "attention step operand is not BSHD with D contiguous: ", t.describe());
  return {t.data, t.stride[0], t.stride[1], t.stride[2], t.dtype};
}

RowArg rows(const TensorView& t) {
  BURST_CHECK(t.ndim == 3 && t.dtype == DType::F32, Internal,
              "attention step row operand is not fp32 [B,H,S]: ", t.describe());
  return {static_cast<float*>(t.data), t.stride[0], t.stride[1], t.stride[2]};
}

bool in_device_memory(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // a plain host pointer on an old runtime: not an error of ours
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

/// Positions and the slice table as device arrays: used as they are when they already live in
/// device memory, else copied into one stream-ordered block freed on the stream after the step.
class DeviceTables {
 public:
  DeviceTables(const kernels::KernelArgs& a, std::int64_t S_q, std::int64_t S_kv, cudaStream_t stream)
      : stream_(stream) {
    const std::size_t n_q = static_cast<std::size_t>(S_q) * sizeof(std::int64_t),
                      n_kv = static_cast<std::size_t>(S_kv) * sizeof(std::int64_t),
                      n_s = static_cast<std::size_t>(a.mask_slice_count) * sizeof(MaskSlice);
    const bool host_q = n_q > 0 && !in_device_memory(a.q_pos),
               host_kv = n_kv > 0 && !in_device_memory(a.kv_pos),
               host_s = n_s > 0 && !in_device_memory(a.mask_slices);
    const std::size_t bytes = (host_s ? n_s : 0) + (host_q ? n_q : 0) + (host_kv ? n_kv : 0);
    if (bytes > 0) check(cudaMallocAsync(&block_, bytes, stream), "cudaMallocAsync (attention positions)");
    auto* at = static_cast<unsigned char*>(block_);
    auto place = [&](const void* src, std::size_t n, bool host) -> const void* {
      if (!host) return src;
      check(cudaMemcpyAsync(at, src, n, cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync (attention positions)");
      const void* placed = at;
      at += n;
      return placed;
    };
    try {  // a failed copy throws from the constructor, where the destructor would not free block_
      slices = static_cast<const MaskSlice*>(place(a.mask_slices, n_s, host_s));  // first: 8-byte aligned
      q_pos = static_cast<const std::int64_t*>(place(a.q_pos, n_q, host_q));
      kv_pos = static_cast<const std::int64_t*>(place(a.kv_pos, n_kv, host_kv));
    } catch (...) {
      cudaFreeAsync(block_, stream_);
      throw;
    }
  }
  ~DeviceTables() {
    if (block_ != nullptr) cudaFreeAsync(block_, stream_);  // after the step's kernels, in stream order
  }
  DeviceTables(const DeviceTables&) = delete;
  DeviceTables& operator=(const DeviceTables&) = delete;

  const std::int64_t* q_pos = nullptr;
  const std::int64_t* kv_pos = nullptr;
  const MaskSlice* slices = nullptr;

 private:
  cudaStream_t stream_;
  void* block_ = nullptr;
};

StepArgs step_args(const TensorView& q, const TensorView& k, const kernels::KernelArgs& a,
                   const DeviceTables& t) {
  StepArgs s;
  s.B = q.shape[0];
  s.S_q = q.shape[1];
  s.H = q.shape[2];
  s.D = q.shape[3];
  s.S_kv = k.shape[1];
  s.H_kv = k.shape[2];
  BURST_CHECK(s.H_kv > 0 && s.H % s.H_kv == 0 && k.shape[3] == s.D, Internal, "attention step shapes: q ",
              q.describe(), ", k ", k.describe());
  s.scale = a.scale;
  s.q_pos = t.q_pos;
  s.kv_pos = t.kv_pos;
  s.slices = t.slices;
  s.slice_count = a.mask_slice_count;
  return s;
}

constexpr std::int64_t kMaxGridYz = 65535;

bool use_fast(StepKernel which, const std::string& why_not) {
  BURST_CHECK((which != StepKernel::Fast && which != StepKernel::FastMma) || why_not.empty(), Unsupported,
              "the fast CUDA attention kernel: ", why_not);
  return which != StepKernel::Reference && why_not.empty();
}

/// The cuDNN mask of this step when `which` is Cudnn and cuDNN takes it (dout: the backward's),
/// else None: the step then runs on Auto's kernel.
CudnnMaskVerdict cudnn_mask_for(StepKernel which, CudnnState* cudnn, const TensorView& q, const TensorView& k,
                                const TensorView& v, const kernels::KernelArgs& args, cudaStream_t stream,
                                const TensorView* dout = nullptr) {
  if (which != StepKernel::Cudnn) return {};
  BURST_CHECK(cudnn != nullptr && q.device.kind == DeviceKind::Cuda && cudnn->device() == q.device.index,
              Internal, "StepKernel::Cudnn needs a CudnnState of ", to_string(q.device));
  CudnnMaskVerdict m;
  return cudnn_unsupported(q, k, v, args, stream, &m, dout, &cudnn->masks()).empty() ? m : CudnnMaskVerdict{};
}

}  // namespace

std::string fast_unsupported(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView* dout) {
  if (q.dtype != DType::BF16 && q.dtype != DType::F16)
    return std::string("it takes bf16 or f16 operands, not ") + to_string(q.dtype) +
           " (fp32 runs on the reference twin: tf32 would miss the fp32 contract)";
  if (k.dtype != q.dtype || v.dtype != q.dtype || (dout != nullptr && dout->dtype != q.dtype))
    return "q, k, v and dout must share one dtype";
  if (q.ndim != 4 || (q.shape[3] != 64 && q.shape[3] != 128))
    return "it takes head dims 64 and 128, not " + std::to_string(q.ndim == 4 ? q.shape[3] : -1);
  // Its grid is (tiles, heads, batch): gridDim.y and .z stop at 65535.
  if (q.shape[0] > kMaxGridYz || q.shape[2] > kMaxGridYz)
    return "its grid takes B and H up to " + std::to_string(kMaxGridYz) + ", not B " +
           std::to_string(q.shape[0]) + ", H " + std::to_string(q.shape[2]);
  int device = 0, major = 0;
  if (q.device.kind == DeviceKind::Cuda) device = q.device.index;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return "the compute capability of cuda:" + std::to_string(device) + " is unknown";
  }
  if (major < 8)
    return "it needs compute capability 8.0 or newer (bf16 wmma), cuda:" + std::to_string(device) + " has " +
           std::to_string(major);
  // Its blocks take more shared memory than the 48 KiB default (the opt-in limit: 227 KiB on
  // H100 / H200, 163 KiB on A100, 99 KiB on sm_86 / sm_89, where neither D = 128 nor the
  // backward at D = 64 fits).
  int optin = 0;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return "the shared memory per block of cuda:" + std::to_string(device) + " is unknown";
  }
  const std::size_t need =
      dout != nullptr ? fast_backward_smem_bytes(q.shape[3]) : fast_forward_smem_bytes(q.shape[3]);
  if (need > static_cast<std::size_t>(optin))
    return "its blocks take " + std::to_string(need) + " bytes of shared memory at D " +
           std::to_string(q.shape[3]) + ", cuda:" + std::to_string(device) + " allows " +
           std::to_string(optin);
  return "";
}

void step_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                  const TensorView& lse, const kernels::KernelArgs& args, cudaStream_t stream,
                  StepKernel which, CudnnState* cudnn) {
  BURST_CHECK(q.device.kind == DeviceKind::Cuda, Internal, "attention step on ", to_string(q.device));
  const DeviceScope scope(q.device);
  if (which == StepKernel::Cudnn) {
    const CudnnMaskVerdict m = cudnn_mask_for(which, cudnn, q, k, v, args, stream);
    if (m.mask != CudnnMask::None && cudnn_step_forward(*cudnn, m, q, k, v, out, lse, args.scale, stream))
      return;
    which = StepKernel::Auto;
  }
  const bool fast = use_fast(which, which == StepKernel::Reference ? "" : fast_unsupported(q, k, v));
  const DeviceTables tables(args, q.shape[1], k.shape[1], stream);
  ForwardArgs a;
  a.s = step_args(q, k, args, tables);
  a.q = bshd(q);
  a.k = bshd(k);
  a.v = bshd(v);
  a.out = bshd(out);
  a.lse = rows(lse);
  if (fast && which == StepKernel::FastMma) {
    launch_mma_forward(a, stream);
  } else if (fast) {
    launch_fast_forward(a, stream);
  } else {
    launch_reference_forward(a, stream);
  }
}

void step_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& lse, const TensorView& delta, const TensorView& dq, const TensorView& dk,
                   const TensorView& dv, const kernels::KernelArgs& args, bool accumulate,
                   cudaStream_t stream, StepKernel which, CudnnState* cudnn, const TensorView* out) {
  BURST_CHECK(q.device.kind == DeviceKind::Cuda, Internal, "attention step on ", to_string(q.device));
  BURST_CHECK(!accumulate || (dq.dtype == DType::F32 && dk.dtype == DType::F32 && dv.dtype == DType::F32),
              Internal, "accumulating attention gradients into ", dq.describe());
  const DeviceScope scope(q.device);
  if (which == StepKernel::Cudnn) {
    const CudnnMaskVerdict m = cudnn_mask_for(which, cudnn, q, k, v, args, stream, &dout);
    if (m.mask != CudnnMask::None && cudnn_step_backward(*cudnn, m, dout, q, k, v, out, lse, delta, dq, dk,
                                                         dv, args.scale, accumulate, stream))
      return;
    which = StepKernel::Auto;
  }
  const bool fast = use_fast(which, which == StepKernel::Reference ? "" : fast_unsupported(q, k, v, &dout));
  const DeviceTables tables(args, q.shape[1], k.shape[1], stream);
  BackwardArgs a;
  a.s = step_args(q, k, args, tables);
  a.dout = bshd(dout);
  a.q = bshd(q);
  a.k = bshd(k);
  a.v = bshd(v);
  a.lse = rows(lse);
  a.delta = rows(delta);
  a.dq = bshd(dq);
  a.dk = bshd(dk);
  a.dv = bshd(dv);
  a.accumulate = accumulate;
  if (!fast) {
    launch_reference_backward(a, stream);
    return;
  }
  // The fast kernel adds τ·dS·K into an fp32 dQ with atomics: dq itself when fp32 (zeroed
  // first unless accumulating), else a zeroed fp32 workspace rounded into dq afterwards.
  if (dq.dtype == DType::F32) {
    if (!accumulate) fill(dq, 0.0f, stream);
    launch_fast_backward(a, stream);
    return;
  }
  const std::int64_t B = q.shape[0], S_q = q.shape[1], H = q.shape[2], D = q.shape[3];
  const auto bytes = static_cast<std::size_t>(B * S_q * H * D) * sizeof(float);
  void* ws = nullptr;
  if (bytes > 0) {
    check(cudaMallocAsync(&ws, bytes, stream), "cudaMallocAsync (dq workspace)");
    check(cudaMemsetAsync(ws, 0, bytes, stream), "cudaMemsetAsync (dq workspace)");
  }
  TensorView wide = make_view(static_cast<const void*>(ws), DType::F32, {B, S_q, H, D});
  wide.data = ws;
  wide.device = q.device;
  a.dq = bshd(wide);
  try {
    launch_fast_backward(a, stream);
    if (bytes > 0) copy(wide, dq, stream);
  } catch (...) {
    if (ws != nullptr) cudaFreeAsync(ws, stream);
    throw;
  }
  if (ws != nullptr) cudaFreeAsync(ws, stream);
}

}  // namespace burst::cuda
