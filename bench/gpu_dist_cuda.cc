// bench/gpu.h with CUDA, `bench dist --device cuda`: DistAttention on a rank's GPU, its tensors
// and CUDA-event timing on the CudaDevice's stream (every pass's work is enqueued there).
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "bench/gpu.h"
#include "burst/error.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_memory.h"
#include "strategy_device.h"

namespace burst::bench {
namespace {

void check(cudaError_t e, const char* what) {
  BURST_CHECK(e == cudaSuccess, Internal, what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

class CudaDist final : public GpuDist {
 public:
  explicit CudaDist(int index) : index_(index), dev_(std::make_shared<const device::CudaDevice>(index)) {
    cudaDeviceProp p{};
    name_ = cudaGetDeviceProperties(&p, index) == cudaSuccess ? std::string(p.name) : std::string("unknown");
    // The events belong to this rank's GPU (recorded on its stream), whichever is current.
    const cuda::DeviceScope scope(Device{DeviceKind::Cuda, index_});
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&end_), "cudaEventCreate");
  }
  ~CudaDist() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(end_);
  }
  CudaDist(const CudaDist&) = delete;
  CudaDist& operator=(const CudaDist&) = delete;

  int index() const override { return index_; }
  std::string name() const override { return name_; }
  DistAttention make(const Communicator& comm, const DistConfig& cfg, const ProblemShape& shape,
                     const Mask& mask) const override {
    return DistAttention(comm, cfg, shape, mask,
                         DistAttention::OnDevice{dev_, Device{DeviceKind::Cuda, index_}});
  }
  TensorView upload(const TensorView& host) override {
    const std::int64_t bytes = host.numel() * static_cast<std::int64_t>(dtype_size(host.dtype));
    held_.push_back(dev_->allocate(bytes, device::MemoryKind::Device));
    TensorView v = make_view(static_cast<const void*>(held_.back().data()), host.dtype,
                             std::vector<std::int64_t>(host.shape.begin(), host.shape.begin() + host.ndim));
    v.device = Device{DeviceKind::Cuda, index_};
    dev_->copy_from_host(static_cast<const std::byte*>(host.data), held_.back().data(), bytes);
    dev_->wait(dev_->record());
    return v;
  }
  double time(const std::function<void()>& fn) override {
    const auto stream = static_cast<cudaStream_t>(dev_->stream());
    const cuda::DeviceScope scope(Device{DeviceKind::Cuda, index_});
    check(cudaEventRecord(start_, stream), "cudaEventRecord");
    fn();
    check(cudaEventRecord(end_, stream), "cudaEventRecord");
    check(cudaEventSynchronize(end_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, end_), "cudaEventElapsedTime");
    return ms / 1e3;
  }
  std::string step_kernels() const override { return dev_->choice_summary(); }

 private:
  int index_;
  std::shared_ptr<const device::CudaDevice> dev_;
  std::string name_;
  std::vector<device::Buffer> held_;
  cudaEvent_t start_ = nullptr, end_ = nullptr;
};

}  // namespace

std::unique_ptr<GpuDist> make_gpu_dist(int requested, int local_rank) {
  return std::make_unique<CudaDist>(choose_gpu(requested, local_rank));
}

}  // namespace burst::bench
