// bench/gpu.h with CUDA: the GPU's name and count, the rank's GPU, CUDA-event timing on the
// device seam's stream, and the step kernels timed on seeded inputs in GPU memory.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI: MPIX_Query_cuda_support
#endif

#include "attention_device.h"
#include "bench/gpu.h"
#include "bench/harness.h"
#include "burst/attention.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "device/cuda/cuda_device.h"
#include "kernels/kernels.h"

namespace burst::bench {
namespace {

int device_count_or_throw(const char* what) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  BURST_CHECK(e == cudaSuccess && n > 0, Unsupported, what, ": no usable CUDA GPU here (",
              e == cudaSuccess ? std::string("the driver reports 0 devices")
                               : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e),
              ")");
  return n;
}

std::string gpu_name(int index) {
  cudaDeviceProp p{};
  return cudaGetDeviceProperties(&p, index) == cudaSuccess ? std::string(p.name) : std::string("unknown");
}

// The answer of MPIX_Query_cuda_support, or why there is none.
nlohmann::json mpi_cuda_aware() {
  int up = 0;
  MPI_Initialized(&up);
  if (!up) return "unknown: MPI not initialised in this process";
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  return MPIX_Query_cuda_support() == 1;
#else
  return "unknown: this MPI's mpi-ext.h has no MPIX_Query_cuda_support";
#endif
}

/// CUDA events around work enqueued on one stream: seconds between them, GPU time.
class GpuTimer {
 public:
  explicit GpuTimer(cudaStream_t s) : stream_(s) {
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&end_), "cudaEventCreate");
  }
  ~GpuTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(end_);
  }
  GpuTimer(const GpuTimer&) = delete;
  GpuTimer& operator=(const GpuTimer&) = delete;
  /// Seconds of GPU time fn's enqueued work took (fn enqueues on the timer's stream).
  double time(const std::function<void()>& fn) {
    check(cudaEventRecord(start_, stream_), "cudaEventRecord");
    fn();
    check(cudaEventRecord(end_, stream_), "cudaEventRecord");
    check(cudaEventSynchronize(end_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, end_), "cudaEventElapsedTime");
    return ms / 1e3;
  }

 private:
  static void check(cudaError_t e, const char* what) {
    BURST_CHECK(e == cudaSuccess, Internal, what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
  }
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, end_ = nullptr;
};

/// Host bytes in GPU memory, with a view of them marked as that GPU's.
struct DeviceTensor {
  device::Buffer buffer;
  TensorView view;
};

DeviceTensor upload(const device::CudaDevice& dev, int index, const TensorView& host) {
  const std::int64_t bytes = host.numel() * static_cast<std::int64_t>(dtype_size(host.dtype));
  DeviceTensor t{dev.allocate(bytes, device::MemoryKind::Device), host};
  t.view.data = t.buffer.data();
  t.view.device = Device{DeviceKind::Cuda, index};
  dev.copy_from_host(static_cast<const std::byte*>(host.data), t.buffer.data(), bytes);
  dev.wait(dev.record());
  return t;
}

template <typename T>
device::Buffer upload_array(const device::CudaDevice& dev, const std::vector<T>& host) {
  const auto bytes = static_cast<std::int64_t>(host.size() * sizeof(T));
  device::Buffer b = dev.allocate(bytes, device::MemoryKind::Device);
  dev.copy_from_host(reinterpret_cast<const std::byte*>(host.data()), b.data(), bytes);
  dev.wait(dev.record());
  return b;
}

/// The GPU tensor's values as fp32 on the host.
std::vector<float> download_f32(const device::CudaDevice& dev, const DeviceTensor& t) {
  const std::int64_t n = t.view.numel(), bytes = n * static_cast<std::int64_t>(dtype_size(t.view.dtype));
  std::vector<std::byte> raw(static_cast<std::size_t>(bytes));
  dev.copy_to_host(t.buffer.data(), raw.data(), bytes);
  dev.wait(dev.record());
  std::vector<float> out(static_cast<std::size_t>(n));
  TensorView src = t.view;
  src.data = raw.data();
  src.device = kHost;
  convert(src,
          make_view(out.data(), std::vector<std::int64_t>(src.shape.begin(), src.shape.begin() + src.ndim)));
  return out;
}

double max_abs_diff(const std::vector<float>& a, const TensorView& host_f32_or_16) {
  std::vector<float> b(static_cast<std::size_t>(host_f32_or_16.numel()));
  convert(host_f32_or_16,
          make_view(b.data(), std::vector<std::int64_t>(host_f32_or_16.shape.begin(),
                                                        host_f32_or_16.shape.begin() + host_f32_or_16.ndim)));
  double m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, std::isnan(a[i]) != std::isnan(b[i]) ? INFINITY : std::fabs(double(a[i]) - b[i]));
  return m;
}

}  // namespace

bool gpu_built() { return true; }

nlohmann::json gpu_info() {
  nlohmann::json j{
      {"built", true}, {"devices", nlohmann::json::array()}, {"mpi_cuda_aware", mpi_cuda_aware()}};
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    j["error"] = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return j;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    j["devices"].push_back({{"index", i},
                            {"name", p.name},
                            {"memory_bytes", static_cast<std::int64_t>(p.totalGlobalMem)},
                            {"compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor)}});
  }
  return j;
}

int choose_gpu(int requested, int local_rank) {
  const int n = device_count_or_throw("--device cuda");
  if (requested >= 0) {
    BURST_CHECK(requested < n, InvalidArgument, "--device cuda:", requested, ": this host has ", n,
                " CUDA device(s), 0..", n - 1);
    return requested;
  }
  return gpu_for_local_rank(local_rank, n);
}

namespace {

// The records of one case, each handed to `emit` as soon as its pass is measured (so a run
// stopped during the backward of a long case has printed its forward), and returned
// (run_kernel_bench_gpu prints them; calibrate_gpu reads their rates).
std::vector<nlohmann::json> kernel_records(const GpuKernelCase& c,
                                           const std::function<void(const nlohmann::json&)>& emit) {
  BURST_CHECK(c.pass == "fwd" || c.pass == "bwd" || c.pass == "both", InvalidArgument,
              "bench kernel: --pass=", c.pass, " (expected fwd, bwd or both)");
  const int index = choose_gpu(c.device, launcher_local_rank());
  const std::int64_t H_kv = c.kv_heads > 0 ? c.kv_heads : c.heads;
  const DType dtype = parse_dtype(c.dtype);
  BURST_CHECK(dtype != DType::F64, InvalidArgument, "bench kernel: --dtype must be fp32, bf16 or fp16");
  const Mask mask = make_benchmark_mask(mask_type_from_string(c.mask), c.seq);
  const ResolvedMask resolved(mask, c.seq, c.seq);
  const std::int64_t pairs = resolved.visible_pairs();
  const std::vector<std::int64_t> q_shape{c.batch, c.seq, c.heads, c.dim},
      kv_shape{c.batch, c.seq, H_kv, c.dim};
  const StoredTensor q(uniform_tensor(q_shape, c.seed), dtype),
      k(uniform_tensor(kv_shape, c.seed + 1), dtype);
  const StoredTensor v(uniform_tensor(kv_shape, c.seed + 2), dtype),
      dout(uniform_tensor(q_shape, c.seed + 3), dtype);
  const StoredTensor out_h(Tensor(q_shape), dtype), dq_h(Tensor(q_shape), dtype);
  const StoredTensor dk_h(Tensor(kv_shape), dtype), dv_h(Tensor(kv_shape), dtype);
  Tensor lse_h({c.batch, c.heads, c.seq}), delta_h({c.batch, c.heads, c.seq});

  const device::CudaDevice dev(index);
  const Device gpu{DeviceKind::Cuda, index};
  const DeviceTensor gq = upload(dev, index, q.view), gk = upload(dev, index, k.view);
  const DeviceTensor gv = upload(dev, index, v.view), gdout = upload(dev, index, dout.view);
  const DeviceTensor gout = upload(dev, index, out_h.view), gdq = upload(dev, index, dq_h.view);
  const DeviceTensor gdk = upload(dev, index, dk_h.view), gdv = upload(dev, index, dv_h.view);
  const DeviceTensor glse = upload(dev, index, lse_h.view()), gdelta = upload(dev, index, delta_h.view());
  std::vector<std::int64_t> pos(static_cast<std::size_t>(c.seq));
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<std::int64_t>(i);
  const device::Buffer gpos = upload_array(dev, pos), gslices = upload_array(dev, resolved.slices());

  kernels::KernelParams p;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  p.q_pos = p.kv_pos = reinterpret_cast<const std::int64_t*>(gpos.data());
  p.mask_slices = reinterpret_cast<const MaskSlice*>(gslices.data());
  p.mask_slice_count = static_cast<std::int64_t>(resolved.slices().size());
  p.host_q_pos = p.host_kv_pos = pos.data();  // host twins: the kernel choice reads no device table
  p.host_mask_slices = resolved.slices().data();
  p.block_q = c.block_q;
  p.block_kv = c.block_kv;
  p.mask = &resolved;

  GpuTimer timer(static_cast<cudaStream_t>(dev.stream()));
  auto timed = [&](const std::function<void()>& fn) {
    for (int i = 0; i < c.warmup; ++i) timer.time(fn);
    std::vector<double> s;
    for (int i = 0; i < c.repeats; ++i) s.push_back(timer.time(fn));
    return summarize(s);
  };
  const bool check = c.check_max_seq > 0 && c.seq <= c.check_max_seq;
  AttentionParams cpu;  // the checks' parameters: the CPU call's, and the GPU entry path's
  cpu.mask = mask;
  std::vector<nlohmann::json> records;
  auto record = [&](const char* pass, const Timing& t, double flop, const char* formula, double err) {
    nlohmann::json j{{"bench", "kernel"},
                     {"pass", pass},
                     {"mask", c.mask},
                     {"batch", c.batch},
                     {"seq", c.seq},
                     {"seq_kv", c.seq},
                     {"heads", c.heads},
                     {"kv_heads", H_kv},
                     {"dim", c.dim},
                     {"dtype", to_string(dtype)},
                     {"impl", "cuda step kernels"},
                     {"device", dev.name()},
                     {"gpu_name", gpu_name(index)},
                     {"timer", "cuda events"},
                     {"block_q", c.block_q},
                     {"block_kv", c.block_kv},
                     {"warmup", c.warmup},
                     {"visible_pairs", pairs},
                     {"flop_formula", formula}};
    add_timing(j, t, flop);
    j["tflops"] = flop / t.median / 1e12;
    j["kernel"] = dev.last_kernel(std::string(pass) == "bwd");  // the device's measured choice (Auto)
    j["choices"] = dev.choice_timings();  // Auto's timings per key (proxy blocks for long steps)
    if (const std::string why = dev.cudnn_refusal(); !why.empty()) j["cudnn_refusal"] = why;
    if (check) j["max_abs_diff_vs_cpu_kernel"] = err;
    if (emit) emit(j);
    records.push_back(std::move(j));
  };
  {  // the forward always runs: the backward needs its out and lse
    const Timing tf = timed([&] { dev.step_forward(gq.view, gk.view, gv.view, gout.view, glse.view, p); });
    double err = 0;
    if (check) {  // the entry path on the GPU (validation, staged positions) against the CPU's
      entry::attention_forward_on(dev, gpu, gq.view, gk.view, gv.view, gout.view, glse.view, cpu);
      attention_forward(q.view, k.view, v.view, out_h.view, lse_h.view(), cpu);
      err = std::max(max_abs_diff(download_f32(dev, gout), out_h.view),
                     max_abs_diff(download_f32(dev, glse), lse_h.view()));
    }
    if (c.pass != "bwd")
      record("fwd", tf, attention_forward_flop(c.batch, c.heads, c.dim, pairs), kAttentionForwardFlopFormula,
             err);
  }
  if (c.pass != "fwd") {
    const Timing tb = timed([&] {
      dev.attention_delta(gdout.view, gout.view, gdelta.view);
      dev.step_backward(gdout.view, gq.view, gk.view, gv.view, glse.view, gdelta.view, gdq.view, gdk.view,
                        gdv.view, p, false, &gout.view);
    });
    double err = 0;
    if (check) {
      entry::attention_backward_on(dev, gpu, gdout.view, gq.view, gk.view, gv.view, gout.view, glse.view,
                                   gdq.view, gdk.view, gdv.view, cpu);
      attention_backward(dout.view, q.view, k.view, v.view, out_h.view, lse_h.view(), dq_h.view, dk_h.view,
                         dv_h.view, cpu);
      err = std::max({max_abs_diff(download_f32(dev, gdq), dq_h.view),
                      max_abs_diff(download_f32(dev, gdk), dk_h.view),
                      max_abs_diff(download_f32(dev, gdv), dv_h.view)});
    }
    record("bwd", tb, attention_backward_flop(c.batch, c.heads, c.dim, pairs), kAttentionBackwardFlopFormula,
           err);
  }
  return records;
}

}  // namespace

void run_kernel_bench_gpu(const GpuKernelCase& c) {
  kernel_records(c, [](const nlohmann::json& j) { print_json_line(j); });
}

nlohmann::json calibrate_gpu(int device, std::int64_t seq, std::int64_t heads, std::int64_t dim,
                             int repeats) {
  GpuKernelCase c;
  c.seq = seq;
  c.heads = heads;
  c.dim = dim;
  c.mask = "causal";
  c.pass = "both";
  c.dtype = "bf16";
  c.repeats = repeats;
  c.device = device;
  const std::vector<nlohmann::json> r = kernel_records(c, nullptr);
  const int index = choose_gpu(device, launcher_local_rank());
  cudaDeviceProp props{};
  cudaGetDeviceProperties(&props, index);
  return {
      {"device", "cuda:" + std::to_string(index)},
      {"gpu_name", props.name},
      {"memory_bytes", static_cast<std::int64_t>(props.totalGlobalMem)},
      {"shape",
       {{"batch", 1}, {"seq", seq}, {"heads", heads}, {"dim", dim}, {"dtype", "bf16"}, {"mask", "causal"}}},
      {"forward_flops", r.at(0).at("gflops").get<double>() * 1e9},
      {"backward_flops", r.at(1).at("gflops").get<double>() * 1e9},
      {"records", r}};
}

}  // namespace burst::bench
