// The Python module's GPU device in a build without CUDA (module_common.h): refused, naming the
// build.
#include <memory>

#include "burst/error.h"
#include "module_common.h"

namespace burst::python {

bool gpu_built() { return false; }

std::unique_ptr<const device::Device> make_gpu_device(int index) {
  BURST_FAIL(Unsupported, "cuda:", index,
             ": this burst module was built without CUDA (BURST_WITH_CUDA=OFF, or AUTO found no nvcc); "
             "rebuild it with -DBURST_WITH_CUDA=ON on a host with the CUDA toolkit (docs/gpu.md)");
}

}  // namespace burst::python
