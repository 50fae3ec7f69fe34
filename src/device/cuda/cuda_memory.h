// src/device/cuda/cuda_memory.h — the CUDA runtime as burst uses it (internal, library
// burst_cuda; docs/gpu.md): the lazy device query, errors as burst::Error, a scoped current
// device, and owning device memory.
// Invariant: nothing here runs before it is called — no static initialiser touches the driver,
// so a program linked with burst_cuda starts, and runs its host paths, on a machine without a
// GPU driver. Does not: choose devices for the caller, or keep state between calls.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "burst/tensor.h"

namespace burst::cuda {

/// The CUDA devices this process can use, asked of the driver at the call (cudaGetDeviceCount).
struct DeviceQuery {
  int count = 0;       ///< usable devices; 0 when the query failed
  std::string reason;  ///< why there are none ("CUDA driver version is insufficient ..."), else empty
};
/// Never throws. Cost: the driver's first initialisation on the first call (~0.1–1 s with a GPU).
DeviceQuery query_devices() noexcept;

/// Throws Error(Internal) "<what>: <cudaGetErrorString>" unless status is cudaSuccess.
void check(cudaError_t status, const char* what);

/// Makes `device` (a Cuda device) the calling thread's current device for its scope, then
/// restores the previous one. Throws: Error(Internal) when the runtime refuses either.
class DeviceScope {
 public:
  explicit DeviceScope(const Device& device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

/// Owning device memory of `bytes` on CUDA device `index` (cudaMalloc; freed on destruction).
/// Movable, not copyable. upload / download are synchronous copies of `bytes` from / to host
/// memory (for tests and callers' boundaries, not hot paths).
/// Throws: Error(Internal) when an allocation or copy fails (no device, out of memory).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int index, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return {DeviceKind::Cuda, index_}; }
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;

 private:
  void release() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int index_ = 0;
};

}  // namespace burst::cuda
