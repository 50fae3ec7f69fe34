// The Python module's GPU device in a CUDA build (module_common.h): a device::CudaDevice.
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "burst/error.h"
#include "device/cuda/cuda_device.h"
#include "module_common.h"

namespace burst::python {

bool gpu_built() { return true; }

std::unique_ptr<const device::Device> make_gpu_device(int index) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  BURST_CHECK(e == cudaSuccess && n > 0, Unsupported, "cuda:", index, ": no usable CUDA GPU here (",
              e == cudaSuccess ? std::string("the driver reports 0 devices")
                               : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e),
              ")");
  BURST_CHECK(index >= 0 && index < n, InvalidArgument, "cuda:", index, ": this host has ", n,
              " CUDA device(s)");
  return std::make_unique<const device::CudaDevice>(index);
}

}  // namespace burst::python
