// bench_step_kernels (attention_cuda.h): the GPU step kernels timed with CUDA events on seeded
// random inputs — the hook for `burst bench kernel --device cuda` and tools/cuda_step_bench.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "burst/error.h"
#include "device/cuda/attention_cuda.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_memory.h"
#include "device/cuda/elementwise.h"

namespace burst::cuda {
namespace {

/// A device buffer of n 16-bit (or fp32) values, uniform in [−1, 1), seeded.
DeviceBuffer random_buffer(int device, std::int64_t n, DType dtype, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::size_t count = static_cast<std::size_t>(n), size = dtype_size(dtype);
  std::vector<unsigned char> host(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    const float x = u(rng);
    if (dtype == DType::F32) {
      std::copy_n(reinterpret_cast<const unsigned char*>(&x), 4, host.data() + 4 * i);
    } else {
      const std::uint16_t h = dtype == DType::BF16 ? bf16_from_float(x) : f16_from_float(x);
      std::copy_n(reinterpret_cast<const unsigned char*>(&h), 2, host.data() + 2 * i);
    }
  }
  DeviceBuffer b(device, host.size());
  b.upload(host.data(), host.size());
  return b;
}

TensorView on(const DeviceBuffer& b, DType dtype, std::vector<std::int64_t> shape) {
  TensorView v = make_view(static_cast<const void*>(b.data()), dtype, std::move(shape));
  v.device = b.device();
  return v;
}

/// Median GPU time (ms) of `reps` runs of fn after `warmup`, from events around each run.
template <typename Fn>
double median_ms(cudaStream_t stream, int warmup, int reps, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    fn();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times.empty() ? 0.0 : times[times.size() / 2];
}

}  // namespace

StepBenchResult bench_step_kernels(const StepBenchCase& c) {
  BURST_CHECK(c.B > 0 && c.S > 0 && c.H > 0 && c.H_kv > 0 && c.H % c.H_kv == 0 && c.D > 0 && c.reps > 0,
              InvalidArgument, "bench_step_kernels: B ", c.B, ", S ", c.S, ", H ", c.H, ", H_kv ", c.H_kv,
              ", D ", c.D, ", reps ", c.reps);
  const DeviceQuery q = query_devices();
  BURST_CHECK(q.count > c.device, Internal, "bench_step_kernels: no CUDA device ", c.device, ": ", q.reason);
  const DeviceScope scope(Device{DeviceKind::Cuda, c.device});
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, c.device), "cudaGetDeviceProperties");
  StepBenchResult r;
  r.gpu = prop.name;

  const ResolvedMask mask(c.mask, c.S, c.S);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(c.S));
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<std::int64_t>(i);
  r.visible_pairs = mask.visible_pairs() * c.B;
  DeviceBuffer pos_d(c.device, pos.size() * sizeof(std::int64_t)),
      slices_d(c.device, mask.slices().size() * sizeof(MaskSlice));
  pos_d.upload(pos.data(), pos_d.bytes());
  slices_d.upload(mask.slices().data(), slices_d.bytes());
  kernels::KernelParams args;
  args.q_pos = args.kv_pos = static_cast<const std::int64_t*>(pos_d.data());
  args.mask_slices = static_cast<const MaskSlice*>(slices_d.data());
  args.mask_slice_count = static_cast<std::int64_t>(mask.slices().size());
  args.host_q_pos = args.host_kv_pos = pos.data();  // what the kernel choice reads (no readback)
  args.host_mask_slices = mask.slices().data();
  args.mask = &mask;
  args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.D)));

  const std::vector<std::int64_t> qs{c.B, c.S, c.H, c.D}, ks{c.B, c.S, c.H_kv, c.D}, rs{c.B, c.H, c.S};
  const std::int64_t nq = c.B * c.S * c.H * c.D, nk = c.B * c.S * c.H_kv * c.D, nr = c.B * c.H * c.S;
  const DeviceBuffer bq = random_buffer(c.device, nq, c.dtype, 1),
                     bk = random_buffer(c.device, nk, c.dtype, 2),
                     bv = random_buffer(c.device, nk, c.dtype, 3),
                     bg = random_buffer(c.device, nq, c.dtype, 4);
  const std::size_t es = dtype_size(c.dtype);
  const DeviceBuffer bo(c.device, static_cast<std::size_t>(nq) * es),
      blse(c.device, static_cast<std::size_t>(nr) * 4), bdelta(c.device, static_cast<std::size_t>(nr) * 4),
      bdq(c.device, static_cast<std::size_t>(nq) * es), bdk(c.device, static_cast<std::size_t>(nk) * es),
      bdv(c.device, static_cast<std::size_t>(nk) * es);
  const TensorView vq = on(bq, c.dtype, qs), vk = on(bk, c.dtype, ks), vv = on(bv, c.dtype, ks),
                   vg = on(bg, c.dtype, qs), vo = on(bo, c.dtype, qs), vlse = on(blse, DType::F32, rs),
                   vdelta = on(bdelta, DType::F32, rs), vdq = on(bdq, c.dtype, qs),
                   vdk = on(bdk, c.dtype, ks), vdv = on(bdv, c.dtype, ks);
  // Through the device seam on GPU c.device, its steps on c.kernel (Auto: the kernel measured
  // fastest for the step's key, chosen in the first warm-up run, which Auto and Cudnn always get:
  // the choice's timings and cuDNN's graph build stay out of the timed runs).
  device::CudaDevice::Options options;
  options.kernel = c.kernel;
  const device::CudaDevice dev(c.device, options);
  const auto stream = static_cast<cudaStream_t>(dev.stream());
  const int warmup =
      c.kernel == StepKernel::Auto || c.kernel == StepKernel::Cudnn ? std::max(c.warmup, 1) : c.warmup;
  r.forward_ms = median_ms(stream, warmup, c.reps, [&] { dev.step_forward(vq, vk, vv, vo, vlse, args); });
  r.kernel = dev.last_kernel(false);
  dev.attention_delta(vg, vo, vdelta);
  r.backward_ms = median_ms(stream, warmup, c.reps, [&] {
    dev.step_backward(vg, vq, vk, vv, vlse, vdelta, vdq, vdk, vdv, args, false, &vo);
  });
  r.backward_kernel = dev.last_kernel(true);
  r.choices = dev.choice_timings();
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const double flops =
      4.0 * static_cast<double>(c.H) * static_cast<double>(c.D) * static_cast<double>(r.visible_pairs);
  if (r.forward_ms > 0) r.forward_tflops = flops / (r.forward_ms * 1e-3) / 1e12;
  if (r.backward_ms > 0) r.backward_tflops = 2.5 * flops / (r.backward_ms * 1e-3) / 1e12;
  return r;
}

}  // namespace burst::cuda
