// src/device/cuda/cuda_device.h — the device seam (device/device.h) on one CUDA GPU (internal,
// library burst_cuda; docs/gpu.md).
//
// Owns: a stream of GPU `index` and what the strategies do there — allocations (cudaMalloc;
// pinned host memory: host ByteBuffers page-locked with cudaHostRegister, so the staging copies
// are asynchronous DMA; the communicator keeps its ByteBuffer currency), events (cudaEvent),
// staging copies, strided and index copies, fill, add, wire-dtype rounding, the online-softmax
// merge and delta (elementwise.h), and the attention step kernels (attention_cuda.h: the own
// tensor-core kernels, their reference twin, cuDNN's fused SDPA), each step on the kernel chosen
// for its key by measured speed (Options; cuda_device_steps.cc). Views the seam passes point into this GPU's
// memory whatever their `device` field says (the strategies build them with make_view): each
// operation marks them as this GPU's before the launch.
// Construction is the first CUDA call: nothing runs at program start.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "device/cuda/attention_cuda.h"
#include "device/device.h"
#include "device/kernel_choice.h"

namespace burst::device {

class CudaDevice final : public Device {
 public:
  /// Which kernel runs the attention steps (docs/gpu.md § Auto).
  struct Options {
    /// Auto: per step key — pass, dtypes, B, H, H_kv, S_q and S_kv (rounded up to powers of
    /// two), D, whether the operands are packed, cuDNN's mask verdict, accumulate — the fastest
    /// of the kernels that take the step (Fast; FastMma for the forward; Cudnn), each timed with
    /// CUDA events on scratch outputs at
    /// the key's first use (one untimed run first: cuDNN builds its graph there), chosen once
    /// and cached (KernelChooser); the twin where none takes it. Any other value forces that
    /// kernel where it takes the step — Cudnn: else Fast where Fast does; Fast, FastMma: else
    /// the twin (FastMma's backward is Fast's) — for tests and benchmarks.
    /// KernelParams::impl = Reference still sends a step to the twin.
    cuda::StepKernel kernel = cuda::StepKernel::Auto;
    /// Timed runs per candidate (the median decides), ≥ 1.
    int timing_runs = 3;
    /// A step longer than this (query rows or keys) is timed on a block of this many rows and
    /// keys of its mask class (cuda_device_steps.cc: Proxy), ≥ 1.
    std::int64_t timing_max_rows = 32768;
    /// For the tests only: cuDNN runs its steps under a mask that is not theirs
    /// (CudnnMaskCache::plant_wrong_verdicts) — the planted wrong choice a GPU test must catch.
    bool plant_wrong_cudnn_mask = false;
  };

  /// A stream on CUDA device `index` (cudaStreamNonBlocking).
  /// Throws: Error(Internal) naming the runtime's reason when there is no such usable device.
  explicit CudaDevice(int index = 0) : CudaDevice(index, Options{}) {}
  CudaDevice(int index, Options options);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  std::string name() const override;
  bool host_memory() const override { return false; }
  /// True where cuDNN may take steps (built with its frontend, Options::kernel Auto or Cudnn):
  /// it takes only steps that are wholly full or causal (docs/gpu.md § cuDNN). The own kernels
  /// skip invisible tiles themselves, so with them alone a cut step is only more launches.
  bool prefers_shaped_steps() const override;
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
  /// One launch (cuda::index_copy): the host index table is checked against the bounds; the
  /// kernel reads `index_twin` (the caller's copy in this GPU's memory, uploaded once per plan)
  /// or, without one, a copy of `index` made per call (stream-ordered: cudaMallocAsync /
  /// cudaFreeAsync around the launch). Without an index, one copy (or add) of the whole views.
  void index_copy(const TensorView& src, const TensorView& dst, int dim, const std::int64_t* index,
                  const std::int64_t* index_twin, bool scatter, bool accumulate) const override;
  void fill(const TensorView& dst, float value) const override;
  void add(const TensorView& x, const TensorView& acc) const override;
  void convert(const TensorView& src, const TensorView& dst) const override;
  void merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                     const TensorView& lse_part) const override;
  void attention_delta(const TensorView& dout, const TensorView& out, const TensorView& delta) const override;
  void step_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, const kernels::KernelParams& p) const override;
  /// `out`: the global out delta came from, read by cuDNN when in q's dtype (else cuDNN reads a
  /// stand-in made from dout and delta: attention_cudnn.h); the own kernels read delta.
  void step_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& lse, const TensorView& delta, const TensorView& dq,
                     const TensorView& dk, const TensorView& dv, const kernels::KernelParams& p,
                     bool accumulate, const TensorView* out = nullptr) const override;
  /// What ran the last step_forward (backward false) or step_backward: "reference", "fast",
  /// "fast_mma" or "cudnn" ("" before the first). For benchmark records.
  std::string last_kernel(bool backward) const;
  /// The choices made so far (Auto): per key, the kernel (a cuda::StepKernel as int) and the
  /// candidates' times.
  const KernelChooser& choices() const;
  /// cuDNN graphs executed by this device's steps (0 without cuDNN).
  std::int64_t cudnn_executed() const;
  /// Why cuDNN refused the last graph it refused on this device (CudnnState::last_refusal), or "".
  std::string cudnn_refusal() const;
  /// "kernel name: keys" for each kernel chosen by Auto, e.g. "cudnn: 3, fast: 1" ("" for none).
  std::string choice_summary() const;
  /// The measured choices with their times, one per timed key: "bwd 32768x32768: fast 41.2 ms,
  /// cudnn 6.3 ms -> cudnn; ..." (S_q x S_kv as the key's length classes; "refused" for a
  /// candidate that did not take the step).
  std::string choice_timings() const;
  /// Copies each view to host memory (waiting for the stream), then the CPU device's fingerprint:
  /// the same value as on the CPU for the same contents.
  std::uint64_t fingerprint(std::initializer_list<TensorView> views) const override;
  /// A reduction on the GPU (cuda::first_nonfinite, the CPU device's scan's twin: the same
  /// answer), then one word copied back (waiting for the stream): no host copy of `t`.
  std::int64_t first_nonfinite(const TensorView& t) const override;

 private:
  struct Steps;  // the step kernels' state: options, choices, cuDNN (cuda_device_steps.cc)
  TensorView here(TensorView v) const;  // v marked as this GPU's memory
  cuda::CudnnState* cudnn_state() const;
  int index_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Steps> steps_;
};

}  // namespace burst::device
