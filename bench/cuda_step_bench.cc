// cuda_step_bench — the GPU attention step kernels (src/device/cuda/attention_cuda.h) timed on a
// GPU host, one JSON line per case: GPU time from CUDA events (median of 10 after 2 warm-ups;
// `cuda_step_bench REPS`: median of REPS after 1, for a host check's time budget)
// and TFLOP/s with burst's formula (forward 4·B·H·D·visible pairs, backward 2.5× that), the
// numbers docs/gpu.md compares with PyTorch's SDPA backends (bench/torch_sdpa.py) on the same
// shapes. The cases are a fixed table (the house's benchmarks are data, not flags); without a
// GPU it prints the reason and exits 77. Built with BURST_WITH_CUDA.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "burst/mask.h"
#include "device/cuda/attention_cuda.h"
#include "device/cuda/cuda_memory.h"

namespace {

struct Row {
  const char* mask;
  std::int64_t S, H, D;
  burst::cuda::StepKernel kernel;
};

burst::Mask mask_of(const std::string& name, std::int64_t S) {
  if (name == "full") return burst::Mask::full();
  if (name == "causal") return burst::Mask::causal_mask();
  if (name == "sliding_window_causal") return burst::Mask::sliding_window(S / 8, 0, true);
  return burst::make_benchmark_mask(burst::mask_type_from_string(name), S);
}

const char* requested(burst::cuda::StepKernel k) {
  switch (k) {
    case burst::cuda::StepKernel::Auto: return "auto";
    case burst::cuda::StepKernel::Reference: return "reference";
    case burst::cuda::StepKernel::Fast: return "fast";
    case burst::cuda::StepKernel::FastMma: return "fast_mma";
    case burst::cuda::StepKernel::Cudnn: return "cudnn";
  }
  return "?";
}

/// s with the characters JSON strings may not hold raw (quotes, backslashes, controls) replaced.
std::string json_safe(std::string s) {
  for (char& ch : s)
    if (ch == '"' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20) ch = '\'';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using burst::cuda::StepKernel;
  int reps = 0;  // 0: the case's defaults
  if (argc > 1) {
    char* end = nullptr;
    const long n = std::strtol(argv[1], &end, 10);
    if (argc > 2 || *end != '\0' || n < 1 || n > 1000) {
      std::fprintf(stderr, "usage: cuda_step_bench [REPS]  (REPS: timed repeats per case, 1..1000)\n");
      return 2;
    }
    reps = static_cast<int>(n);
  }
  const burst::cuda::DeviceQuery q = burst::cuda::query_devices();
  if (q.count == 0) {
    std::fprintf(stderr, "cuda_step_bench: no CUDA device: %s\n", q.reason.c_str());
    return 77;
  }
  // The shapes PyTorch's SDPA backends are measured at (S = 32K; H 8, D 64 and H 32, D 128;
  // full and causal), a document mask and a window (the own kernels skip invisible tiles; cuDNN
  // takes the window as its diagonal band: a row of its own), and the
  // reference twin for scale; FastMma (the mma.sync forward, Fast's backward) and cuDNN's fused
  // SDPA (StepKernel::Cudnn, where built with the frontend; else its rows run Fast and say so in
  // "kernel") forced, beside Auto — the device's choice by measured speed: "kernel" /
  // "backward_kernel" name what ran, "choices" every candidate's time (Fast's among them).
  const std::vector<Row> rows = {
      {"causal", 32768, 8, 64, StepKernel::Auto},
      {"full", 32768, 8, 64, StepKernel::Auto},
      {"causal", 32768, 32, 128, StepKernel::Auto},
      {"full", 32768, 32, 128, StepKernel::Auto},
      {"causal_document", 32768, 8, 64, StepKernel::Auto},
      {"sliding_window_causal", 32768, 8, 64, StepKernel::Auto},
      {"causal", 32768, 8, 64, StepKernel::FastMma},
      {"causal", 32768, 32, 128, StepKernel::FastMma},
      {"causal", 32768, 8, 64, StepKernel::Cudnn},
      {"full", 32768, 8, 64, StepKernel::Cudnn},
      {"causal", 32768, 32, 128, StepKernel::Cudnn},
      {"full", 32768, 32, 128, StepKernel::Cudnn},
      {"sliding_window_causal", 32768, 8, 64, StepKernel::Cudnn},
      {"causal", 4096, 8, 64, StepKernel::Auto},
      {"causal", 4096, 8, 64, StepKernel::Reference},
  };
  int rc = 0;
  for (const Row& row : rows) {
    burst::cuda::StepBenchCase c;
    c.S = row.S;
    c.H = c.H_kv = row.H;
    c.D = row.D;
    c.mask = mask_of(row.mask, row.S);
    c.kernel = row.kernel;
    if (reps > 0) c.warmup = 1, c.reps = reps;
    if (row.kernel == StepKernel::Reference) c.warmup = 0, c.reps = 1;
    try {
      const burst::cuda::StepBenchResult r = burst::cuda::bench_step_kernels(c);
      std::printf(
          "{\"bench\":\"cuda_step\",\"gpu\":\"%s\",\"requested\":\"%s\",\"kernel\":\"%s\","
          "\"backward_kernel\":\"%s\",\"choices\":\"%s\",\"mask\":\"%s\",\"B\":1,\"S\":%lld,"
          "\"H\":%lld,"
          "\"H_kv\":%lld,\"D\":%lld,\"dtype\":\"bf16\",\"reps\":%d,\"visible_pairs\":%lld,\"forward_ms\":%."
          "4f,"
          "\"backward_ms\":%.4f,\"forward_tflops\":%.2f,\"backward_tflops\":%.2f}\n",
          r.gpu.c_str(), requested(row.kernel), r.kernel.c_str(), r.backward_kernel.c_str(),
          json_safe(r.choices).c_str(), row.mask, static_cast<long long>(c.S), static_cast<long long>(c.H),
          static_cast<long long>(c.H_kv), static_cast<long long>(c.D), c.reps,
          static_cast<long long>(r.visible_pairs), r.forward_ms, r.backward_ms, r.forward_tflops,
          r.backward_tflops);
    } catch (const std::exception& e) {
      std::printf("{\"bench\":\"cuda_step\",\"mask\":\"%s\",\"S\":%lld,\"error\":\"%s\"}\n", row.mask,
                  static_cast<long long>(row.S), json_safe(e.what()).c_str());
      rc = 1;
    }
    std::fflush(stdout);
  }
  return rc;
}
