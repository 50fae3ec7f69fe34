// bench/gpu.h — the benchmarks' GPU side (`burst bench kernel --device cuda`, `burst calibrate
// --device cuda`, `burst info`): what a CUDA build of burst_bench adds (gpu_cuda.cc, with
// BURST_WITH_CUDA), and the clear refusal of a build without it (gpu_none.cc).
// Owns: choosing a rank's GPU, DistAttention on it (`bench dist --device cuda`) (local rank modulo the device
// count), the GPU's name, timing with CUDA events on the device's stream, and the kernel benchmark on a GPU
// (the device seam's step kernels, src/device/device.h, on seeded inputs in GPU memory). Does not:
// communicate (MPI is only asked whether it handles device pointers).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "burst/comm.h"
#include "burst/strategy.h"
#include "burst/tensor.h"

namespace burst::bench {

/// True when this build has the CUDA side (built with BURST_WITH_CUDA and a CUDA toolkit).
bool gpu_built();

/// What this process sees: {"built": bool, "devices": [{"index", "name", "memory_bytes",
/// "compute_capability"}...], "error": why none (no driver, no device) when there are none,
/// "mpi_cuda_aware": MPIX_Query_cuda_support() where MPI is initialised and Open MPI's mpi-ext.h
/// has it, else a string saying why it is unknown}. Never throws for a missing GPU.
nlohmann::json gpu_info();

/// The CUDA device a rank computes on: `requested` ≥ 0 → that one; −1 → local_rank modulo the
/// number of devices (each rank of a node its own GPU while there are enough, ranks sharing
/// them round-robin beyond). local_rank: the rank among the node's processes (the caller reads
/// it: Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, or an MPI shared-memory split).
/// Throws: Error(Unsupported) naming the build without CUDA, or the runtime's reason when no
/// device is usable; Error(InvalidArgument) for an index past the device count.
int choose_gpu(int requested, int local_rank);

/// local_rank modulo count: the GPU of a rank when `count` GPUs are visible (choose_gpu's rule).
/// Throws: Error(Unsupported) for count < 1; Error(InvalidArgument) for local_rank < 0.
int gpu_for_local_rank(int local_rank, int count);

/// The local rank of this process from the launcher's environment (Open MPI's
/// OMPI_COMM_WORLD_LOCAL_RANK, then Hydra's MPI_LOCALRANKID, then Slurm's SLURM_LOCALID; the
/// first that holds a number), 0 when none does. `lookup` reads a variable (std::getenv; tests
/// pass their own).
int launcher_local_rank(const std::function<const char*(const char*)>& lookup = std::getenv);

/// Parses --device: "cpu" / "host" → −2; "cuda" → −1 (choose_gpu picks); "cuda:N" → N.
/// Throws: Error(InvalidArgument) for anything else, naming it.
int parse_bench_device(const std::string& name);

/// One `bench kernel --device cuda` case (the CPU bench's options, bench_kernel.cc).
struct GpuKernelCase {
  std::int64_t batch = 1, seq = 0, heads = 0, kv_heads = 0, dim = 0;
  std::string mask, pass, dtype;
  int repeats = 5, warmup = 1, block_q = 0, block_kv = 0;
  std::uint64_t seed = 1;
  int device = -1;                 ///< parse_bench_device's answer (≥ −1)
  std::int64_t check_max_seq = 0;  ///< compare with the CPU kernel when seq ≤ this (0: never)
};

/// Times the device seam's step_forward (forward) and attention_delta + step_backward
/// (backward) on GPU `c.device` with CUDA events; prints one JSON line per pass, the CPU bench's
/// fields plus device, gpu_name, timer and tflops; with a check, the largest difference between
/// the entry path on the GPU (src/attention_device.h: attention_forward_on / _backward_on with the
/// GPU's device) and the CPU kernel (attention_forward / attention_backward) on the same rounded
/// inputs.
/// Throws: Error(Unsupported) without CUDA or a usable GPU, or what the step kernels throw.
void run_kernel_bench_gpu(const GpuKernelCase& c);

/// The GPU's attention rates for `burst calibrate --device cuda`: the step kernels' forward and
/// backward TFLOP/s (bf16, causal, B 1, the given S, H, D; burst's FLOP formula) and a bf16
/// matrix product's (cuBLAS, 8192³), with the GPU's name and memory, as JSON.
/// Throws: as run_kernel_bench_gpu.
nlohmann::json calibrate_gpu(int device, std::int64_t seq, std::int64_t heads, std::int64_t dim, int repeats);

/// A rank's GPU for `bench dist --device cuda` (gpu_dist_cuda.cc): the DistAttention whose
/// operands live there (src/strategy_device.h), its tensors, and CUDA-event timing on the
/// stream the passes run on.
class GpuDist {
 public:
  virtual ~GpuDist() = default;
  /// The GPU's index and name ("NVIDIA H200").
  virtual int index() const = 0;
  virtual std::string name() const = 0;
  /// DistAttention (burst/strategy.h) with every pass on this GPU. Collective as its constructor.
  virtual DistAttention make(const Communicator& comm, const DistConfig& cfg, const ProblemShape& shape,
                             const Mask& mask) const = 0;
  /// A contiguous copy of host view `host` (any dtype) in the GPU's memory, marked as this
  /// GPU's; kept until this object is destroyed.
  virtual TensorView upload(const TensorView& host) = 0;
  /// GPU seconds between CUDA events recorded on the passes' stream before and after fn.
  virtual double time(const std::function<void()>& fn) = 0;
  /// The step kernels this rank's device chose so far (its Auto choice by measured speed), as
  /// "kernel: step keys, ...", e.g. "cudnn: 2, fast: 3" (records' "kernel").
  virtual std::string step_kernels() const = 0;
};

/// The GPU of choose_gpu(requested, local_rank).
/// Throws: as choose_gpu (Error(Unsupported) in a build without CUDA, naming it).
std::unique_ptr<GpuDist> make_gpu_dist(int requested, int local_rank);

}  // namespace burst::bench
