// bench/gpu.h in a build without CUDA: every GPU request is refused, naming the build.
#include "bench/gpu.h"
#include "burst/error.h"

namespace burst::bench {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  BURST_FAIL(Unsupported, what,
             ": this burst was built without CUDA (BURST_WITH_CUDA=OFF, or AUTO found no nvcc); "
             "rebuild with -DBURST_WITH_CUDA=ON on a host with the CUDA toolkit (docs/gpu.md)");
}

}  // namespace

bool gpu_built() { return false; }

nlohmann::json gpu_info() {
  return {{"built", false}, {"devices", nlohmann::json::array()}, {"error", "built without CUDA"}};
}

int choose_gpu(int, int) { no_cuda("--device cuda"); }

void run_kernel_bench_gpu(const GpuKernelCase&) { no_cuda("bench kernel --device cuda"); }

std::unique_ptr<GpuDist> make_gpu_dist(int, int) { no_cuda("bench dist --device cuda"); }

nlohmann::json calibrate_gpu(int, std::int64_t, std::int64_t, std::int64_t, int) {
  no_cuda("calibrate --device cuda");
}

}  // namespace burst::bench
