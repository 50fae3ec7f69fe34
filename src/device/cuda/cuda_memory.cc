// The CUDA runtime as burst uses it (cuda_memory.h): every call made on demand, none at start-up.
#include "device/cuda/cuda_memory.h"

#include <utility>

#include "burst/error.h"

namespace burst::cuda {

DeviceQuery query_devices() noexcept {
  DeviceQuery q;
  const cudaError_t status = cudaGetDeviceCount(&q.count);
  if (status != cudaSuccess) {
    q.count = 0;
    q.reason = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    cudaGetLastError();  // the failed query is reported here, not to the next caller
  } else if (q.count == 0) {
    q.reason = "the driver reports no CUDA device";
  }
  return q;
}

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();
  BURST_FAIL(Internal, what, ": ", cudaGetErrorName(status), ": ", cudaGetErrorString(status));
}

DeviceScope::DeviceScope(const Device& device) {
  BURST_CHECK(device.kind == DeviceKind::Cuda, Internal, "DeviceScope: ", to_string(device),
              " is not a CUDA device");
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device.index) {
    check(cudaSetDevice(device.index), "cudaSetDevice");
    changed_ = true;
  }
}

DeviceScope::~DeviceScope() {
  if (changed_) cudaSetDevice(previous_);  // best effort: a destructor does not throw
}

DeviceBuffer::DeviceBuffer(int index, std::size_t bytes) : bytes_(bytes), index_(index) {
  if (bytes == 0) return;
  const DeviceScope scope(device());
  check(cudaMalloc(&data_, bytes), "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      index_(other.index_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    index_ = other.index_;
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (data_ != nullptr) cudaFree(data_);  // frees on the allocation's device whatever is current
  data_ = nullptr;
  bytes_ = 0;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  BURST_CHECK(bytes <= bytes_, InvalidArgument, "DeviceBuffer::upload: ", bytes, " bytes into ", bytes_);
  if (bytes == 0) return;
  const DeviceScope scope(device());
  check(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}

void DeviceBuffer::download(void* host, std::size_t bytes) const {
  BURST_CHECK(bytes <= bytes_, InvalidArgument, "DeviceBuffer::download: ", bytes, " bytes from ", bytes_);
  if (bytes == 0) return;
  const DeviceScope scope(device());
  check(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}

}  // namespace burst::cuda
