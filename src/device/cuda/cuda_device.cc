// The device seam on one CUDA GPU (cuda_device.h): the elementwise twins of elementwise.h on
// this device's stream, plus memory, events and staging from the CUDA runtime.
#include "device/cuda/cuda_device.h"

#include <vector>

#include "burst/error.h"
#include "device/cuda/attention_cuda.h"
#include "device/cuda/cuda_memory.h"
#include "device/cuda/elementwise.h"

namespace burst::device {
namespace {

void free_device_memory(const void*, void* data, std::int64_t) {
  cudaFree(data);  // frees on the allocation's device, whatever is current
}

/// Elements [i, i + 1) of dimension `dim` of t.
TensorView slice(const TensorView& t, int dim, std::int64_t i) {
  TensorView s = t;
  const auto d = static_cast<std::size_t>(dim);
  s.shape[d] = 1;
  s.data = static_cast<char*>(t.data) + i * t.stride[d] * static_cast<std::int64_t>(dtype_size(t.dtype));
  return s;
}

}  // namespace

CudaDevice::CudaDevice(int index) : index_(index) {
  const cuda::DeviceScope scope(burst::Device{DeviceKind::Cuda, index});
  cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

CudaDevice::~CudaDevice() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

std::string CudaDevice::name() const { return to_string(burst::Device{DeviceKind::Cuda, index_}); }

TensorView CudaDevice::here(TensorView v) const {
  v.device = burst::Device{DeviceKind::Cuda, index_};
  return v;
}

Buffer CudaDevice::allocate(std::int64_t bytes, MemoryKind kind) const {
  BURST_CHECK(bytes >= 0, Internal, "allocation of ", bytes, " bytes");
  if (kind == MemoryKind::PinnedHost) return Buffer(ByteBuffer(static_cast<std::size_t>(bytes)));
  if (bytes == 0) return Buffer();
  const cuda::DeviceScope scope(burst::Device{DeviceKind::Cuda, index_});
  void* data = nullptr;
  cuda::check(cudaMalloc(&data, static_cast<std::size_t>(bytes)), "cudaMalloc");
  return Buffer(data, bytes, &free_device_memory, this);
}

Event CudaDevice::record() const {
  const cuda::DeviceScope scope(burst::Device{DeviceKind::Cuda, index_});
  cudaEvent_t e = nullptr;
  cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  cuda::check(cudaEventRecord(e, stream_), "cudaEventRecord");
  return {static_cast<void*>(e)};
}

bool CudaDevice::ready(const Event& e) const {
  if (e.handle == nullptr) return true;
  const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(e.handle));
  if (status == cudaErrorNotReady) return false;
  cuda::check(status, "cudaEventQuery");
  return true;
}

void CudaDevice::wait(const Event& e) const {
  if (e.handle == nullptr) return;
  const auto event = static_cast<cudaEvent_t>(e.handle);
  const cudaError_t status = cudaEventSynchronize(event);
  cudaEventDestroy(event);
  cuda::check(status, "cudaEventSynchronize");
}

void CudaDevice::copy_to_host(const std::byte* src, std::byte* dst_host, std::int64_t bytes) const {
  if (bytes <= 0) return;
  const cuda::DeviceScope scope(burst::Device{DeviceKind::Cuda, index_});
  cuda::check(
      cudaMemcpyAsync(dst_host, src, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToHost, stream_),
      "cudaMemcpyAsync to the host");
}

void CudaDevice::copy_from_host(const std::byte* src_host, std::byte* dst, std::int64_t bytes) const {
  if (bytes <= 0) return;
  const cuda::DeviceScope scope(burst::Device{DeviceKind::Cuda, index_});
  cuda::check(
      cudaMemcpyAsync(dst, src_host, static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice, stream_),
      "cudaMemcpyAsync to the device");
}

void CudaDevice::copy(const TensorView& src, const TensorView& dst) const {
  BURST_CHECK(src.dtype == dst.dtype, Internal, "copy between dtypes: ", src.describe(), " to ",
              dst.describe());
  cuda::copy(here(src), here(dst), stream_);
}

void CudaDevice::index_copy(const TensorView& src, const TensorView& dst, int dim, const std::int64_t* index,
                            bool scatter, bool accumulate) const {
  BURST_CHECK(src.dtype == dst.dtype && src.ndim == dst.ndim && dim >= 0 && dim < src.ndim, Internal,
              "index_copy along dim ", dim, " from ", src.describe(), " to ", dst.describe());
  BURST_CHECK(!accumulate || src.dtype == DType::F32, Internal, "index_copy accumulating into ",
              dst.describe());
  const std::int64_t n = (scatter ? src : dst).size(dim);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t mapped = index != nullptr ? index[i] : i;
    const TensorView s = slice(src, dim, scatter ? i : mapped), d = slice(dst, dim, scatter ? mapped : i);
    if (accumulate) {
      cuda::add(here(d), here(s), stream_);
    } else {
      cuda::copy(here(s), here(d), stream_);
    }
  }
}

void CudaDevice::fill(const TensorView& dst, float value) const { cuda::fill(here(dst), value, stream_); }

void CudaDevice::add(const TensorView& x, const TensorView& acc) const {
  cuda::add(here(acc), here(x), stream_);
}

void CudaDevice::convert(const TensorView& src, const TensorView& dst) const {
  cuda::copy(here(src), here(dst), stream_);
}

void CudaDevice::merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                               const TensorView& lse_part) const {
  cuda::merge_forward(here(out), here(lse), here(out_part), here(lse_part), stream_);
}

void CudaDevice::attention_delta(const TensorView& dout, const TensorView& out,
                                 const TensorView& delta) const {
  cuda::attention_delta(here(dout), here(out), here(delta), stream_);
}

// The step kernels of attention_cuda.h: KernelImpl::Reference runs the reference twin, any
// other choice the fast kernel where it supports the case (else the twin). The positions and the
// slice table may be host or device memory (attention_cuda.h copies host ones per call).
void CudaDevice::step_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const TensorView& lse,
                              const kernels::KernelParams& p) const {
  cuda::step_forward(here(q), here(k), here(v), here(out), here(lse), p, stream_,
                     p.impl == KernelImpl::Reference ? cuda::StepKernel::Reference : cuda::StepKernel::Auto);
}

void CudaDevice::step_backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                               const TensorView& v, const TensorView& lse, const TensorView& delta,
                               const TensorView& dq, const TensorView& dk, const TensorView& dv,
                               const kernels::KernelParams& p, bool accumulate) const {
  cuda::step_backward(here(dout), here(q), here(k), here(v), here(lse), here(delta), here(dq), here(dk),
                      here(dv), p, accumulate, stream_,
                      p.impl == KernelImpl::Reference ? cuda::StepKernel::Reference : cuda::StepKernel::Auto);
}

std::uint64_t CudaDevice::fingerprint(std::initializer_list<TensorView> views) const {
  std::vector<ByteBuffer> host;
  std::vector<TensorView> host_views;
  host.reserve(views.size());
  for (const TensorView& v : views) {
    const auto bytes = static_cast<std::size_t>(v.numel()) * dtype_size(v.dtype);
    Buffer packed = allocate(static_cast<std::int64_t>(bytes), MemoryKind::Device);
    TensorView contiguous = make_view(static_cast<const void*>(packed.data()), v.dtype,
                                      std::vector<std::int64_t>(v.shape.begin(), v.shape.begin() + v.ndim));
    if (bytes > 0) cuda::copy(here(v), here(contiguous), stream_);
    host.emplace_back(bytes);
    copy_to_host(packed.data(), host.back().data(), static_cast<std::int64_t>(bytes));
    cuda::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    contiguous.data = host.back().data();
    host_views.push_back(contiguous);
  }
  const auto cpu = make_cpu_device();
  switch (host_views.size()) {  // fingerprint takes an initializer_list: the seam's callers pass 1 to 4 views
    case 0: return cpu->fingerprint({});
    case 1: return cpu->fingerprint({host_views[0]});
    case 2: return cpu->fingerprint({host_views[0], host_views[1]});
    case 3: return cpu->fingerprint({host_views[0], host_views[1], host_views[2]});
    case 4: return cpu->fingerprint({host_views[0], host_views[1], host_views[2], host_views[3]});
  }
  BURST_FAIL(Unsupported, name(), ": fingerprint of ", host_views.size(), " views (at most 4)");
}

}  // namespace burst::device
