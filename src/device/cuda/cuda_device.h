// src/device/cuda/cuda_device.h — the device seam (device/device.h) on one CUDA GPU (internal,
// library burst_cuda; docs/gpu.md).
//
// Owns: a stream of GPU `index` and what the strategies do there — allocations (cudaMalloc;
// pinned host memory: host ByteBuffers page-locked with cudaHostRegister, so the staging copies
// are asynchronous DMA; the communicator keeps its ByteBuffer currency), events (cudaEvent),
// staging copies, strided and index copies, fill, add, wire-dtype rounding, the online-softmax
// merge and delta (elementwise.h), and the attention step kernels (attention_cuda.h: the fast
// tensor-core kernels or their reference twin). Views the seam passes point into this GPU's
// memory whatever their `device` field says (the strategies build them with make_view): each
// operation marks them as this GPU's before the launch.
// Construction is the first CUDA call: nothing runs at program start.
#pragma once

#include <cuda_runtime_api.h>

#include "device/device.h"

namespace burst::device {

class CudaDevice final : public Device {
 public:
  /// A stream on CUDA device `index` (cudaStreamNonBlocking).
  /// Throws: Error(Internal) naming the runtime's reason when there is no such usable device.
  explicit CudaDevice(int index = 0);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  std::string name() const override;
  bool host_memory() const override { return false; }
  /// Device: cudaMalloc. PinnedHost: a ByteBuffer page-locked with cudaHostRegister (released
  /// by release_pinned, which the pools call before freeing it).
  Buffer allocate(std::int64_t bytes, MemoryKind kind) const override;
  void release_pinned(ByteBuffer& bytes) const noexcept override;
  StreamHandle stream() const override { return stream_; }
  Event record() const override;
  bool ready(const Event& e) const override;
  void wait(const Event& e) const override;
  void copy_to_host(const std::byte* src, std::byte* dst_host, std::int64_t bytes) const override;
  void copy_from_host(const std::byte* src_host, std::byte* dst, std::int64_t bytes) const override;
  void copy(const TensorView& src, const TensorView& dst) const override;
  /// One launch (cuda::index_copy): the host index table is checked against the bounds, copied
  /// to device memory once per call (stream-ordered: cudaMallocAsync / cudaFreeAsync around the
  /// launch), and read by the kernel. Without an index, one copy (or add) of the whole views.
  void index_copy(const TensorView& src, const TensorView& dst, int dim, const std::int64_t* index,
                  bool scatter, bool accumulate) const override;
  void fill(const TensorView& dst, float value) const override;
  void add(const TensorView& x, const TensorView& acc) const override;
  void convert(const TensorView& src, const TensorView& dst) const override;
  void merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                     const TensorView& lse_part) const override;
  void attention_delta(const TensorView& dout, const TensorView& out, const TensorView& delta) const override;
  void step_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, const kernels::KernelParams& p) const override;
  void step_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& lse, const TensorView& delta, const TensorView& dq,
                     const TensorView& dk, const TensorView& dv, const kernels::KernelParams& p,
                     bool accumulate) const override;
  /// Copies each view to host memory (waiting for the stream), then the CPU device's fingerprint:
  /// the same value as on the CPU for the same contents.
  std::uint64_t fingerprint(std::initializer_list<TensorView> views) const override;
  /// Packs `t` contiguous on the GPU, copies it to host memory (waiting for the stream), then
  /// the CPU device's scan: the same answer as on the CPU.
  std::int64_t first_nonfinite(const TensorView& t) const override;

 private:
  TensorView here(TensorView v) const;  // v marked as this GPU's memory
  int index_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace burst::device
