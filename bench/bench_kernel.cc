// `burst bench kernel`: times attention_forward / attention_backward (the public API, so the
// numbers include validation and dispatch) on seeded random BSHD inputs stored as --dtype (fp32,
// bf16 or fp16: q, k, v, dout, out, dq, dk, dv in that dtype, lse fp32; 16-bit values are the
// fp32 draws rounded to nearest even).
// FLOPs: forward 4·B·H·D·visible_pairs, backward 2.5× that (bench/harness.h); visible_pairs is
// the mask area over [0,S) × [0,S_kv) from ResolvedMask::visible_pairs().
#include "bench/bench_kernel.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/cli_options.h"
#include "bench/gpu.h"
#include "bench/harness.h"
#include "burst/attention.h"
#include "burst/dispatch.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "burst/splitmix64.h"
#include "burst/tensor.h"

namespace burst::bench {
namespace {

struct KernelBenchOptions {
  std::int64_t batch = 1, seq = 4096, seq_kv = 0, heads = 8, kv_heads = 0, dim = 64;
  std::string mask = "full", pass = "both", impl = "tiled", isa = "auto", dtype = "fp32", device = "cpu";
  int threads = 1, repeats = 5, warmup = 1, block_q = 0, block_kv = 0;
  std::uint64_t seed = 1;
  std::int64_t check_max_seq = 4096;
};

// --device cuda: the device seam's step kernels on a GPU (bench/gpu.h), the same shape options.
void run_kernel_bench_on_gpu(const KernelBenchOptions& o, int device) {
  const std::int64_t S_kv = o.seq_kv > 0 ? o.seq_kv : o.seq;
  BURST_CHECK(o.seq == S_kv, InvalidArgument, "bench kernel: benchmark masks need --seq-kv == --seq, got ",
              o.seq, " and ", S_kv);
  GpuKernelCase c;
  c.batch = o.batch;
  c.seq = o.seq;
  c.heads = o.heads;
  c.kv_heads = o.kv_heads;
  c.dim = o.dim;
  c.mask = o.mask;
  c.pass = o.pass;
  c.dtype = o.dtype;
  c.repeats = o.repeats;
  c.warmup = o.warmup;
  c.block_q = o.block_q;
  c.block_kv = o.block_kv;
  c.seed = o.seed;
  c.device = device;
  c.check_max_seq = o.check_max_seq;
  run_kernel_bench_gpu(c);
}

// FMA rate of one core right now (GFLOP/s per CPU-second, median of 3 × ~5 ms): this machine is
// shared, so each record carries the peak measured next to it and the kernel's fraction of it
// (fraction_of_peak uses CPU time for both: gflops_cpu / (peak · threads)). The rate of a shared
// core also changes within a run (a busy sibling thread or neighbour): the probe also runs after
// every timed repeat, and fraction_of_peak_paired is the median over repeats of that repeat's
// rate (flop / its CPU seconds) over the probe right after it.
double fma_peak_now(Isa isa) {
  const std::int64_t iters = std::int64_t{1} << 20;
  double flop = 0;
  const Timing t = time_runs([&] { flop = run_fma_probe(isa, iters); }, TimingOptions{1, 3, {}});
  return flop / t.cpu_median / 1e9;
}

// bf16 ceiling of one core right now (same timing as fma_peak_now): the tdpbf16ps probe on the
// AMX path, the vdpbf16ps probe on Avx512Bf16; 0 elsewhere.
double bf16_peak_now(Isa isa) {
  double flop = 0;
  if (isa == Isa::Amx) {
    const Timing t = time_runs([&] { flop = run_amx_probe(std::int64_t{1} << 16); }, TimingOptions{1, 3, {}});
    return flop / t.cpu_median / 1e9;
  }
  if (isa != Isa::Avx512Bf16) return 0;
  const Timing t =
      time_runs([&] { flop = run_bf16_dot_probe(std::int64_t{1} << 19); }, TimingOptions{1, 3, {}});
  return flop / t.cpu_median / 1e9;
}

void run_kernel_bench(const KernelBenchOptions& o) {
  const int device = parse_bench_device(o.device);
  if (device != -2) return run_kernel_bench_on_gpu(o, device);
  BURST_CHECK(o.pass == "fwd" || o.pass == "bwd" || o.pass == "both", InvalidArgument,
              "bench kernel: --pass=", o.pass, " (expected fwd, bwd or both)");
  BURST_CHECK(o.impl == "tiled" || o.impl == "reference", InvalidArgument, "bench kernel: --impl=", o.impl,
              " (expected tiled or reference)");
  const std::int64_t S_kv = o.seq_kv > 0 ? o.seq_kv : o.seq;
  const std::int64_t H_kv = o.kv_heads > 0 ? o.kv_heads : o.heads;
  BURST_CHECK(o.seq == S_kv, InvalidArgument, "bench kernel: benchmark masks need --seq-kv == --seq, got ",
              o.seq, " and ", S_kv);
  const MaskType type = mask_type_from_string(o.mask);

  AttentionParams params;
  params.mask = make_benchmark_mask(type, o.seq);
  params.num_threads = o.threads;
  params.impl = o.impl == "tiled" ? KernelImpl::Tiled : KernelImpl::Reference;
  params.isa = burst::parse_isa(o.isa);
  params.block_q = o.block_q;
  params.block_kv = o.block_kv;
  const std::int64_t pairs = ResolvedMask(params.mask, o.seq, S_kv).visible_pairs();

  const DType dtype = parse_dtype(o.dtype);
  BURST_CHECK(dtype != DType::F64, InvalidArgument, "bench kernel: --dtype must be fp32, bf16 or fp16");
  // The path each pass takes (burst/dispatch.h); both passes resolve alike today.
  const Isa isa = resolve_isa(params.isa, dtype, KernelPass::Forward);
  BURST_CHECK(isa_available(isa), Unsupported, "bench kernel: --isa=", o.isa,
              " is not available on this CPU");
  const std::vector<std::int64_t> q_shape{o.batch, o.seq, o.heads, o.dim},
      kv_shape{o.batch, S_kv, H_kv, o.dim};
  const StoredTensor q(uniform_tensor(q_shape, o.seed), dtype),
      k(uniform_tensor(kv_shape, o.seed + 1), dtype);
  const StoredTensor v(uniform_tensor(kv_shape, o.seed + 2), dtype),
      dout(uniform_tensor(q_shape, o.seed + 3), dtype);
  const StoredTensor out(Tensor(q_shape), dtype), dq(Tensor(q_shape), dtype);
  const StoredTensor dk(Tensor(kv_shape), dtype), dv(Tensor(kv_shape), dtype);
  Tensor lse({o.batch, o.heads, o.seq});
  const TimingOptions topt{o.warmup, o.repeats, {}};

  double peak_before = 0, bf16_peak_before = 0;
  std::vector<double> paired_peaks;  // the FMA probe after each timed repeat of the current pass
  TimingOptions paired = topt;
  paired.after_each = [&] { paired_peaks.push_back(fma_peak_now(isa)); };
  auto record = [&](const char* pass, const Timing& t, double flop, const char* formula) {
    nlohmann::json j;
    j["bench"] = "kernel";
    j["pass"] = pass;
    j["mask"] = o.mask;
    j["batch"] = o.batch;
    j["seq"] = o.seq;
    j["seq_kv"] = S_kv;
    j["heads"] = o.heads;
    j["kv_heads"] = H_kv;
    j["dim"] = o.dim;
    j["dtype"] = to_string(dtype);
    j["threads"] = o.threads;
    j["impl"] = o.impl;
    j["isa"] = to_string(isa);
    j["isa_requested"] = o.isa;
    j["block_q"] = o.block_q;
    j["block_kv"] = o.block_kv;
    j["warmup"] = o.warmup;
    j["visible_pairs"] = pairs;
    j["flop_formula"] = formula;
    add_timing(j, t, flop);
    const double peak = std::max(peak_before, fma_peak_now(isa));
    j["fma_peak_gflops_1core"] = peak;
    j["fraction_of_peak"] = j["gflops_cpu"].get<double>() / peak;
    std::vector<double> ratios;
    for (std::size_t i = 0; i < t.cpu_samples.size() && i < paired_peaks.size(); ++i)
      if (t.cpu_samples[i] > 0) ratios.push_back(flop / t.cpu_samples[i] / 1e9 / paired_peaks[i]);
    if (!ratios.empty()) {
      j["fma_peak_paired_gflops"] = summarize(paired_peaks).median;
      j["fraction_of_peak_paired"] = summarize(ratios).median;
    }
    // bf16 arithmetic (bf16 GEMM operands, P rounded to bf16) runs for bf16 inputs on
    // Avx512Bf16 (vdpbf16ps) and Amx (tdpbf16ps); its ceiling is that instruction's probe, timed
    // beside the pass like the FMA one (none for the emulated tiles).
    const bool bf16_dot = bf16_operands(isa, dtype);
    j["arithmetic"] = !bf16_dot ? "fp32" : isa == Isa::Avx512Bf16 ? "bf16-dot" : "bf16-amx";
    if (bf16_dot && isa != Isa::AmxEmulated) {
      const double bpeak = std::max(bf16_peak_before, bf16_peak_now(isa));
      j["bf16_dot_peak_gflops_1core"] = bpeak;
      j["fraction_of_bf16_peak"] = j["gflops_cpu"].get<double>() / bpeak;
    }
    j["loadavg_1m"] = load_average_1m();
    print_json_line(j);
  };

  const bool fwd = o.pass != "bwd", bwd = o.pass != "fwd";
  peak_before = fma_peak_now(isa);
  bf16_peak_before = bf16_peak_now(isa);
  paired_peaks.clear();
  const Timing tf =
      time_runs([&] { attention_forward(q.view, k.view, v.view, out.view, lse.view(), params); },
                fwd ? paired : TimingOptions{0, 1, {}});
  if (fwd)
    record("fwd", tf, attention_forward_flop(o.batch, o.heads, o.dim, pairs), kAttentionForwardFlopFormula);
  if (bwd) {
    peak_before = fma_peak_now(isa);
    bf16_peak_before = bf16_peak_now(isa);
    paired_peaks.clear();
    const Timing tb = time_runs(
        [&] {
          attention_backward(dout.view, q.view, k.view, v.view, out.view, lse.view(), dq.view, dk.view,
                             dv.view, params);
        },
        paired);
    record("bwd", tb, attention_backward_flop(o.batch, o.heads, o.dim, pairs), kAttentionBackwardFlopFormula);
  }
}

}  // namespace

void add_kernel_bench(CLI::App& bench) {
  auto opt = std::make_shared<KernelBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("kernel", "local attention kernel: one JSON line per pass");
  cmd->add_option("--seq", opt->seq, "S (queries and keys)")->capture_default_str();
  cmd->add_option("--seq-kv", opt->seq_kv, "S_kv (must equal S for benchmark masks; 0 = S)");
  add_shape_options(cmd, opt->batch, opt->heads, opt->kv_heads, opt->dim);
  cmd->add_option("--mask", opt->mask, "one of the 14 benchmark masks, e.g. full, causal")
      ->capture_default_str();
  cmd->add_option("--pass", opt->pass, "fwd | bwd | both")->capture_default_str();
  add_timing_options(cmd, opt->threads, opt->repeats, opt->warmup);
  cmd->add_option("--impl", opt->impl, "tiled | reference")->capture_default_str();
  add_dtype_option(cmd, opt->dtype, "fp32|bf16|fp16", "storage of q, k, v, dout and results (lse fp32)");
  cmd->add_option(
         "--isa", opt->isa,
         "auto (the fastest path per dtype: burst info) | amx | amx-emulated | avx512bf16 | avx512 | avx2 | "
         "portable")
      ->envname("BURST_ISA")
      ->capture_default_str();
  cmd->add_option("--block-q", opt->block_q, "q tile rows (0 = kernel default)");
  cmd->add_option("--block-kv", opt->block_kv, "kv tile rows (0 = kernel default)");
  cmd->add_option("--seed", opt->seed, "input seed")->capture_default_str();
  cmd->add_option("--device", opt->device,
                  "cpu | cuda (each rank: local rank modulo the GPU count) | cuda:N — cuda times the step "
                  "kernels on a GPU with CUDA events (a CUDA build)")
      ->capture_default_str();
  cmd->add_option("--check-max-seq", opt->check_max_seq,
                  "cuda: compare with the CPU kernel when S <= this (0: never)")
      ->capture_default_str();
  cmd->callback([opt] { run_kernel_bench(*opt); });
}

}  // namespace burst::bench
