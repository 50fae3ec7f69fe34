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

}  // namespace

std::string CudaDevice::name() const { return to_string(burst::Device{DeviceKind::Cuda, index_}); }

TensorView CudaDevice::here(TensorView v) const {
  v.device = burst::Device{DeviceKind::Cuda, index_};
  return v;
}

Buffer CudaDevice::allocate(std::int64_t bytes, MemoryKind kind) const {
  BURST_CHECK(bytes >= 0, Internal, "allocation of ", bytes, " bytes");
  if (kind == MemoryKind::PinnedHost) {
    // Page-locked in place: the bytes stay a ByteBuffer the communicator can own, and copies to
    // and from them run asynchronously on the stream (pageable memory would be staged by the
    // driver, synchronously).
    // Registration works on whole pages: a small block sharing a page with one registered
    // before is refused (cudaErrorHostMemoryAlreadyRegistered) and stays pageable — its copies
    // are then synchronous, never wrong.
    ByteBuffer host(static_cast<std::size_t>(bytes));
    if (bytes > 0) {
      const cudaError_t status = cudaHostRegister(host.data(), host.size(), cudaHostRegisterDefault);
      if (status == cudaErrorHostMemoryAlreadyRegistered)
        cudaGetLastError();
      else
        cuda::check(status, "cudaHostRegister");
    }
    return Buffer(std::move(host));
  }
  if (bytes == 0) return Buffer();
  const cuda::DeviceScope scope(burst::Device{DeviceKind::Cuda, index_});
  void* data = nullptr;
  cuda::check(cudaMalloc(&data, static_cast<std::size_t>(bytes)), "cudaMalloc");
  return Buffer(data, bytes, &free_device_memory, this);
}

void CudaDevice::release_pinned(ByteBuffer& bytes) const noexcept {
  if (bytes.empty()) return;
  // A buffer this device never registered (e.g. a communicator's copy handed back to a pool)
  // reports cudaErrorHostMemoryNotRegistered: nothing to undo, and the error is cleared.
  if (cudaHostUnregister(bytes.data()) != cudaSuccess) cudaGetLastError();
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
                            const std::int64_t* index_twin, bool scatter, bool accumulate) const {
  BURST_CHECK(src.dtype == dst.dtype && src.ndim == dst.ndim && dim >= 0 && dim < src.ndim, Internal,
              "index_copy along dim ", dim, " from ", src.describe(), " to ", dst.describe());
  BURST_CHECK(!accumulate || src.dtype == DType::F32, Internal, "index_copy accumulating into ",
              dst.describe());
  if (index == nullptr) {  // the identity: one copy (or add) of the whole views
    if (accumulate)
      cuda::add(here(dst), here(src), stream_);
    else
      cuda::copy(here(src), here(dst), stream_);
    return;
  }
  const std::int64_t n = (scatter ? src : dst).size(dim), bound = (scatter ? dst : src).size(dim);
  for (std::int64_t i = 0; i < n; ++i)
    BURST_CHECK(index[i] >= 0 && index[i] < bound, Internal, "index_copy: index[", i, "] = ", index[i],
                " outside [0, ", bound, ")");
  if (n == 0 || (scatter ? src : dst).numel() == 0) return;
  const cuda::DeviceScope scope(burst::Device{DeviceKind::Cuda, index_});
  if (index_twin != nullptr) {  // the caller's copy in this GPU's memory: one launch, no upload
    cuda::index_copy(here(src), here(dst), dim, index_twin, scatter, accumulate, stream_);
    return;
  }
  // Without a twin the index table goes to device memory once per call (stream-ordered
  // allocation: freed after the launch that reads it), then one launch moves every element.
  const auto bytes = static_cast<std::size_t>(n) * sizeof(std::int64_t);
  void* table = nullptr;
  cuda::check(cudaMallocAsync(&table, bytes, stream_), "cudaMallocAsync (index table)");
  cuda::check(cudaMemcpyAsync(table, index, bytes, cudaMemcpyHostToDevice, stream_),
              "cudaMemcpyAsync (index table)");
  cuda::index_copy(here(src), here(dst), dim, static_cast<const std::int64_t*>(table), scatter, accumulate,
                   stream_);
  cuda::check(cudaFreeAsync(table, stream_), "cudaFreeAsync (index table)");
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

std::int64_t CudaDevice::first_nonfinite(const TensorView& t) const {
  BURST_CHECK(t.ndim == 4, Internal, "first_nonfinite: ", t.describe(), " is not 4-dimensional");
  const Buffer word = allocate(sizeof(std::int64_t), MemoryKind::Device);
  auto* first = static_cast<std::int64_t*>(static_cast<void*>(word.data()));
  cuda::first_nonfinite(here(t), first, stream_);  // a reduction on the GPU: one word comes back
  std::int64_t answer = -1;
  const cuda::DeviceScope scope(burst::Device{DeviceKind::Cuda, index_});
  cuda::check(cudaMemcpyAsync(&answer, first, sizeof answer, cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpyAsync (first_nonfinite)");
  cuda::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return answer;
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
