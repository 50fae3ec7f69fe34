// `burst bench dist` (bench_dist.h): one distributed case, timed with the shared harness.
// Times are per pass on every rank, reduced as max over ranks per repeat, then summarised
// (median) by bench/harness.h — the harness never communicates, this file does.
#include "bench/bench_dist.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <ctime>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <omp.h>

#include "bench/bench_timeline.h"
#include "bench/cli_options.h"
#include "bench/gpu.h"
#include "bench/harness.h"
#include "bench/slow_device.h"
#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/dispatch.h"
#include "burst/error.h"
#include "burst/splitmix64.h"
#include "burst/strategy.h"
#include "strategy_device.h"

namespace burst::bench {
namespace {

struct DistOptions {
  std::string strategy = "burst", layout = "zigzag", mask = "causal", pass = "both", backward_side = "auto";
  std::string dtype = "fp32", usp_ring = "ring", partials_dtype = "fp32", timeline, device = "cpu";
  std::int64_t batch = 1, seq = 4096, heads = 8, kv_heads = 0, dim = 64;
  int threads = 1, repeats = 3, warmup = 1, ranks_per_node = 0, ulysses_degree = 0;
  double comm_timeout = 300;
  std::vector<int> slow_ranks;  // --emulate-slow-rank (−1: the last rank)
  double slow_factor = 1.0;
  bool no_overlap = false, no_return_overlap = false, no_double_ring = false, no_mask_aware = false;
};

struct Sample {
  double seconds = 0, exposed = 0, compute = 0, cpu = 0, gpu = 0;
  std::int64_t bytes = 0, peak = 0;
  std::string side;
  std::int64_t inter = 0;  // bytes to ranks on other nodes
};

/// Max over ranks of one pass's measurements; balance from per-rank compute seconds.
struct Reduced {
  double seconds = 0, exposed = 0, compute_max = 0, compute_mean = 0, cpu = 0, gpu = 0;
  double busiest = 0;  // max over ranks of a rank's wall minus its waits (its busy time)
  std::int64_t bytes = 0, peak = 0, inter = 0;
};

Reduced reduce(const Communicator& c, const Sample& s) {
  Reduced r;
  r.seconds = c.all_reduce_max(s.seconds);
  r.exposed = c.all_reduce_max(s.exposed);
  r.busiest = c.all_reduce_max(s.seconds - s.exposed);
  r.cpu = c.all_reduce_max(s.cpu);
  r.gpu = c.all_reduce_max(s.gpu);
  r.compute_max = c.all_reduce_max(s.compute);
  // mean via a sum of microseconds in int64 (control data; exact enough for a ratio)
  r.compute_mean =
      static_cast<double>(c.all_reduce_sum(static_cast<std::int64_t>(s.compute * 1e9))) / 1e9 / c.size();
  r.bytes = c.all_reduce_max(s.bytes);
  r.peak = c.all_reduce_max(s.peak);
  r.inter = c.all_reduce_max(s.inter);
  return r;
}

/// The fp32 FMA rate of the calling thread (run_fma_probe on the fp32 kernels' path), in GFLOP
/// per wall second and per thread CPU-second: one warm-up, then the medians of 5 runs of ~5 ms.
struct FmaRate {
  double wall = 0, cpu = 0;
};

FmaRate fma_rate_this_thread(Isa isa) {
  const std::int64_t iters = std::int64_t{1} << 20;
  (void)run_fma_probe(isa, iters);
  std::vector<double> wall, cpu;
  for (int i = 0; i < 5; ++i) {
    const double c0 = cpu_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
    const auto t0 = std::chrono::steady_clock::now();
    const double flop = run_fma_probe(isa, iters);
    const double w = seconds_since(t0), c = cpu_clock_seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
    if (w > 0 && c > 0) {
      wall.push_back(flop / w / 1e9);
      cpu.push_back(flop / c / 1e9);
    }
  }
  if (wall.empty()) return {};
  return {summarize(wall).median, summarize(cpu).median};
}

/// What each core of the run gives when all of them are busy (docs/manycore.md § The cores'
/// ceiling): every thread of every rank runs the FMA probe at once, right after a barrier.
/// GFLOP/s per wall second (min / median / max over all of them) and the median per thread
/// CPU-second (a core's rate while it runs the thread). Meant for one thread per core: with more
/// threads than cores, time slices of a few ms decide which runs overlap, so the wall rates are a
/// sample of the sharing, not its average.
/// A P = 1 run's value is one core's with the others idle, so a P-rank run's median over P = 1's
/// bounds the strong-scaling efficiency the cores allow. Collective over `world`.
struct CoreCeiling {
  double min = 0, median = 0, max = 0, cpu_median = 0;
  int threads = 0;               ///< probes summarised: ranks × threads per rank
  std::vector<double> per_rank;  ///< each rank's median wall rate over its threads
};

CoreCeiling probe_cores_busy(const Communicator& world, int threads) {
  const Isa isa = resolve_isa(Isa::Auto, DType::F32, KernelPass::Forward);
  std::vector<double> mine(2 * static_cast<std::size_t>(threads), 0.0);  // wall, cpu per thread
  world.barrier();
#pragma omp parallel num_threads(threads)
  {
    const FmaRate r = fma_rate_this_thread(isa);
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    mine[2 * t] = r.wall;
    mine[2 * t + 1] = r.cpu;
  }
  std::vector<double> all(mine.size() * static_cast<std::size_t>(world.size()));
  world.all_gather(std::as_bytes(std::span<const double>(mine)),
                   std::as_writable_bytes(std::span<double>(all)));
  std::vector<double> wall, cpu;
  for (std::size_t i = 0; i < all.size(); i += 2) {
    wall.push_back(all[i]);
    cpu.push_back(all[i + 1]);
  }
  const Timing w = summarize(wall);
  CoreCeiling c{w.min, w.median, w.max, summarize(cpu).median, static_cast<int>(wall.size()), {}};
  const auto T = static_cast<std::size_t>(threads);
  for (std::size_t r = 0; r < wall.size(); r += T)
    c.per_rank.push_back(summarize(std::vector<double>(wall.begin() + static_cast<std::ptrdiff_t>(r),
                                                       wall.begin() + static_cast<std::ptrdiff_t>(r + T)))
                             .median);
  return c;
}

BackwardSide side_from(const std::string& s) {
  if (s == "auto") return BackwardSide::Auto;
  if (s == "query") return BackwardSide::QuerySide;
  if (s == "kv") return BackwardSide::KvSide;
  BURST_FAIL(InvalidArgument, "--backward-side '", s, "' (valid: auto, query, kv)");
}

void run_dist(const DistOptions& o) {
  BURST_CHECK(o.pass == "fwd" || o.pass == "bwd" || o.pass == "both", InvalidArgument, "--pass '", o.pass,
              "' (valid: fwd, bwd, both)");
  BURST_CHECK(o.repeats >= 1 && o.warmup >= 0, InvalidArgument, "--repeats ", o.repeats, " --warmup ",
              o.warmup);
  const Communicator world = Communicator::world();
  world.set_timeout(o.comm_timeout);  // the harness's own reductions are watched too
  world.set_activity("bench dist (between passes)");
  DistConfig cfg;
  cfg.strategy = strategy_from_string(o.strategy);
  cfg.layout = layout_from_string(o.layout);
  cfg.num_threads = o.threads;
  cfg.ranks_per_node = o.ranks_per_node;
  cfg.ulysses_degree = o.ulysses_degree;
  cfg.usp_ring = usp_ring_from_string(o.usp_ring);
  cfg.overlap = !o.no_overlap;
  cfg.return_overlap = !o.no_return_overlap;
  cfg.double_ring = !o.no_double_ring;
  cfg.mask_aware = !o.no_mask_aware;
  cfg.partials_dtype = parse_partials_dtype(o.partials_dtype, cfg.strategy);
  cfg.comm_timeout_seconds = o.comm_timeout;
  cfg.backward_side = side_from(o.backward_side);
  const std::int64_t H_kv = o.kv_heads > 0 ? o.kv_heads : o.heads;
  ProblemShape shape{o.batch, o.seq, o.heads, H_kv, o.dim};
  shape.dtype = parse_dtype(o.dtype);
  BURST_CHECK(shape.dtype != DType::F64, InvalidArgument, "--dtype must be fp32, bf16 or fp16");
  const Mask mask = make_benchmark_mask(mask_type_from_string(o.mask), o.seq);
  Timeline timeline;  // per-step records of the timed passes (--timeline)
  TimelineCollector collected;
  if (!o.timeline.empty()) {
    TimelineCollector::check_path(world, o.timeline);
    cfg.timeline = &timeline;
  }
  // --device cuda: every rank's tensors and passes on its GPU (local rank modulo the GPUs).
  const int device = parse_bench_device(o.device);
  // --emulate-slow-rank: those ranks' step kernels stretched to --slow-factor times their
  // duration (bench/slow_device.h); every rank parses the same argv, so every rank refuses alike.
  const std::vector<int> slow_ranks = resolve_slow_ranks(o.slow_ranks, world.size());
  BURST_CHECK(slow_ranks.empty() || device == -2, InvalidArgument,
              "--emulate-slow-rank: the CPU device only (not --device ", o.device, ")");
  // The factor on every rank (SlowDevice's own check runs on the slowed ranks only).
  BURST_CHECK(std::isfinite(o.slow_factor) && o.slow_factor >= 1.0, InvalidArgument, "--slow-factor ",
              o.slow_factor, " (valid: a finite number >= 1)");
  BURST_CHECK(o.slow_factor == 1.0 || !slow_ranks.empty(), InvalidArgument, "--slow-factor ", o.slow_factor,
              " needs --emulate-slow-rank");
  const bool slowed = std::find(slow_ranks.begin(), slow_ranks.end(), world.rank()) != slow_ranks.end();
  const std::unique_ptr<GpuDist> gpu = device == -2 ? nullptr : make_gpu_dist(device, launcher_local_rank());
  DistAttention attn = gpu      ? gpu->make(world, cfg, shape, mask)
                       : slowed ? DistAttention(world, cfg, shape, mask,
                                                DistAttention::OnDevice{std::make_shared<const SlowDevice>(
                                                    burst::device::make_cpu_device(), o.slow_factor)})
                                : DistAttention(world, cfg, shape, mask);
  const std::int64_t n = attn.local_length();
  Tensor q32({o.batch, n, o.heads, o.dim}), k32({o.batch, n, H_kv, o.dim}), v32({o.batch, n, H_kv, o.dim});
  Tensor dout32({o.batch, n, o.heads, o.dim}), lse({o.batch, o.heads, n});
  SplitMix64 rng(0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(world.rank() + 1));
  for (Tensor* t : {&q32, &k32, &v32, &dout32})
    for (float& x : t->vec()) x = static_cast<float>(2 * rng.uniform() - 1);
  // Inputs and results stored as --dtype (16-bit: rounded once); lse fp32.
  const std::vector<std::int64_t> q_shape = q32.shape(), kv_shape = k32.shape();
  const StoredTensor q(std::move(q32), shape.dtype), k(std::move(k32), shape.dtype),
      v(std::move(v32), shape.dtype);
  const StoredTensor dout(std::move(dout32), shape.dtype), out(Tensor(q_shape), shape.dtype);
  const StoredTensor dq(Tensor(q_shape), shape.dtype), dk(Tensor(kv_shape), shape.dtype),
      dv(Tensor(kv_shape), shape.dtype);
  // The views the passes take: the host tensors, or their copies on the GPU.
  const auto at = [&](const TensorView& h) { return gpu ? gpu->upload(h) : h; };
  const TensorView vq = at(q.view), vk = at(k.view), vv = at(v.view), vdout = at(dout.view),
                   vout = at(out.view), vdq = at(dq.view), vdk = at(dk.view), vdv = at(dv.view),
                   vlse = at(lse.view());
  const bool fwd = o.pass != "bwd", bwd = o.pass != "fwd";
  // Process CPU seconds of a pass (all threads of this rank): on the shared machine, wall time
  // includes time lost to other jobs; the max over ranks of CPU time shows the algorithm's cost.
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  // ulysses / usp: a backward consumes the context its forward saved; a backward-only run
  // re-runs the forward untimed so that every timed backward is the one training runs.
  const bool saves = cfg.strategy == StrategyKind::Ulysses || cfg.strategy == StrategyKind::Usp;
  int repeat = -1;  // the timed repeat running (−1: warm-up, whose records are dropped)
  auto run_pass = [&](bool backward) {
    if (backward && saves && o.pass == "bwd") attn.forward(vq, vk, vv, vout, vlse);
    timeline.clear();
    const double cpu0 = cpu_now();
    const auto pass = [&] {
      if (backward)
        attn.backward(vdout, vq, vk, vv, vout, vlse, vdq, vdk, vdv);
      else
        attn.forward(vq, vk, vv, vout, vlse);
    };
    double gpu_seconds = 0;
    if (gpu)
      gpu_seconds = gpu->time(pass);
    else
      pass();
    const DistStats& s = attn.last_stats();
    Sample sample{s.seconds,   s.exposed_comm_seconds, s.compute_seconds,   cpu_now() - cpu0,
                  gpu_seconds, s.bytes_sent,           s.peak_buffer_bytes, s.backward_side};
    sample.inter = s.bytes_sent_inter_node;
    if (repeat >= 0 && cfg.timeline)
      collected.add_pass(timeline, backward ? "bwd" : "fwd", world.rank(), repeat, s);
    return sample;
  };
  attn.forward(vq, vk, vv, vout, vlse);  // out, lse for the backward
  for (int i = 0; i < o.warmup; ++i) {
    if (fwd) run_pass(false);
    if (bwd) run_pass(true);
  }
  std::vector<double> t_f, t_b, t_fb, e_f, e_b, x_f, x_b, bal_f, bal_b, c_f, c_b, c_fb, g_f, g_b, g_fb;
  Reduced last_f, last_b;
  Sample sample_f, sample_b;  // this rank's, of the current repeat
  std::string side;
  for (int i = 0; i < o.repeats; ++i) {
    repeat = i;
    world.barrier();
    if (fwd) {
      sample_f = run_pass(false);
      last_f = reduce(world, sample_f);
      t_f.push_back(last_f.seconds);
      c_f.push_back(last_f.cpu);
      g_f.push_back(last_f.gpu);
      e_f.push_back(last_f.exposed);
      x_f.push_back(last_f.seconds - last_f.busiest);
      bal_f.push_back(last_f.compute_mean > 0 ? last_f.compute_max / last_f.compute_mean : 1.0);
    }
    if (bwd) {
      sample_b = run_pass(true);
      side = sample_b.side;
      last_b = reduce(world, sample_b);
      t_b.push_back(last_b.seconds);
      c_b.push_back(last_b.cpu);
      g_b.push_back(last_b.gpu);
      e_b.push_back(last_b.exposed);
      x_b.push_back(last_b.seconds - last_b.busiest);
      bal_b.push_back(last_b.compute_mean > 0 ? last_b.compute_max / last_b.compute_mean : 1.0);
    }
    if (fwd && bwd) {
      // A rank's backward starts when its forward ends, so a rank that left the forward early
      // waits inside its backward for one still in the forward: the wall time of the two is the
      // max over ranks of their sum (the sum of the two maxima can exceed it).
      t_fb.push_back(world.all_reduce_max(sample_f.seconds + sample_b.seconds));
      c_fb.push_back(c_f.back() + c_b.back());
      g_fb.push_back(g_f.back() + g_b.back());
    }
  }
  // The cores' rate with all of them busy, beside the timed passes (not on GPU ranks).
  const CoreCeiling ceiling = gpu ? CoreCeiling{} : probe_cores_busy(world, o.threads);
  // The configuration every record of this run carries (the timeline's on every rank, the
  // summary records on rank 0).
  const Plan& plan = attn.plan();
  nlohmann::json config = {{"strategy", o.strategy},
                           {"layout", o.layout},
                           {"mask", o.mask},
                           {"ranks", world.size()},
                           {"nodes", plan.nodes()},
                           {"threads", o.threads},
                           {"B", o.batch},
                           {"S_global", o.seq},
                           {"H", o.heads},
                           {"H_kv", H_kv},
                           {"D", o.dim},
                           {"dtype", to_string(shape.dtype)},
                           {"overlap", !o.no_overlap},
                           {"mask_aware", plan.forward().mask_aware},
                           {"load_1m", load_average_1m()},
                           {"device", gpu ? "cuda" : "cpu"},
                           {"slow_ranks", slow_ranks},
                           {"slow_factor", slow_ranks.empty() ? 1.0 : o.slow_factor}};
  if (gpu) {  // rank 0's GPU (every rank's: local rank modulo the GPUs, the same model on a host)
    config["gpu_name"] = gpu->name();
    config["gpu_index"] = gpu->index();
    config["kernel"] = gpu->step_kernels();  // rank 0's device: its steps' measured choices
  }
  if (cfg.timeline) {
    nlohmann::json timeline_config = config;
    timeline_config["cpu"] = cpu_model_name();
    collected.write(world, timeline_config, o.timeline, gpu ? nullptr : &ceiling.per_rank);
  }
  if (world.rank() != 0) return;
  const std::int64_t pairs = ResolvedMask(mask, o.seq, o.seq).visible_pairs();
  const double flop_f = attention_forward_flop(o.batch, o.heads, o.dim, pairs);
  const double flop_b = attention_backward_flop(o.batch, o.heads, o.dim, pairs);
  auto base = [&](const char* pass) {
    nlohmann::json j = config;
    j["bench"] = "dist";
    j["pass"] = pass;
    j["ranks_per_node"] = plan.ranks_per_node();
    j["return_overlap"] = !o.no_overlap && !o.no_return_overlap;
    j["visible_pairs"] = pairs;
    j["partials_dtype"] = to_string(cfg.partials_dtype);
    j["warmup"] = o.warmup;
    j["load_1m"] = load_average_1m();
    if (!gpu) {
      j["fma_peak_gflops_per_core_all_busy"] = ceiling.median;
      j["fma_peak_gflops_per_core_all_busy_min"] = ceiling.min;
      j["fma_peak_gflops_per_core_all_busy_max"] = ceiling.max;
      j["fma_peak_gflops_per_core_all_busy_cpu"] = ceiling.cpu_median;
      j["fma_probes_at_once"] = ceiling.threads;
    }
    if (cfg.strategy == StrategyKind::Usp) {
      j["ulysses_degree"] = o.ulysses_degree;
      j["usp_ring"] = o.usp_ring;
    }
    return j;
  };
  auto max_of = [](const std::vector<std::int64_t>& per_rank) {
    std::int64_t m = 0;
    for (auto x : per_rank) m = std::max(m, x);
    return m;
  };
  if (fwd) {
    nlohmann::json j = base("fwd");
    add_timing(j, summarize(t_f), flop_f);
    j["flop_formula"] = kAttentionForwardFlopFormula;
    j["rank_cpu_seconds"] = summarize(c_f).median;
    if (gpu) j["gpu_seconds"] = summarize(g_f).median;
    j["bytes_sent"] = last_f.bytes;
    j["bytes_sent_inter_node"] = last_f.inter;
    j["bytes_predicted"] = max_of(plan.forward().bytes_sent);
    j["exposed_comm_seconds"] = summarize(e_f).median;
    j["exposed_beyond_busiest_seconds"] = summarize(x_f).median;
    j["balance"] = summarize(bal_f).median;
    j["plan_balance"] = plan.forward().balance();
    j["peak_buffer_bytes"] = last_f.peak;
    print_json_line(j);
  }
  if (bwd) {
    nlohmann::json j = base("bwd");
    add_timing(j, summarize(t_b), flop_b);
    j["flop_formula"] = kAttentionBackwardFlopFormula;
    j["rank_cpu_seconds"] = summarize(c_b).median;
    if (gpu) j["gpu_seconds"] = summarize(g_b).median;
    j["bytes_sent"] = last_b.bytes;
    j["bytes_sent_inter_node"] = last_b.inter;
    j["bytes_predicted"] = max_of(plan.backward().bytes_sent);
    j["backward_side"] = side;
    j["exposed_comm_seconds"] = summarize(e_b).median;
    j["exposed_beyond_busiest_seconds"] = summarize(x_b).median;
    j["balance"] = summarize(bal_b).median;
    j["plan_balance"] = plan.backward().balance();
    j["peak_buffer_bytes"] = last_b.peak;
    print_json_line(j);
  }
  if (fwd && bwd) {
    nlohmann::json j = base("fwd+bwd");
    add_timing(j, summarize(t_fb), flop_f + flop_b);
    j["flop_formula"] = "3.5*4*B*H*D*visible_pairs";
    j["rank_cpu_seconds"] = summarize(c_fb).median;
    if (gpu) j["gpu_seconds"] = summarize(g_fb).median;
    j["bytes_sent"] = last_f.bytes + last_b.bytes;
    j["bytes_sent_inter_node"] = last_f.inter + last_b.inter;  // max over ranks per pass, summed
    j["backward_side"] = side;
    j["exposed_comm_seconds"] = summarize(e_f).median + summarize(e_b).median;
    print_json_line(j);
  }
}

}  // namespace

void add_dist_bench(CLI::App& bench) {
  auto o = std::make_shared<DistOptions>();
  auto* cmd = bench.add_subcommand("dist", "one distributed attention case (under mpirun)");
  cmd->add_option("--strategy", o->strategy, "burst|ring|allgather|ulysses|usp|distflash|headpar")
      ->capture_default_str();
  cmd->add_option("--layout", o->layout, "contiguous|zigzag|striped|balanced")->capture_default_str();
  cmd->add_option("--seq", o->seq, "S_global")->capture_default_str();
  add_shape_options(cmd, o->batch, o->heads, o->kv_heads, o->dim);
  cmd->add_option("--mask", o->mask, "benchmark mask name")->capture_default_str();
  cmd->add_option("--pass", o->pass, "fwd|bwd|both")->capture_default_str();
  add_dtype_option(cmd, o->dtype, "fp32|bf16|fp16",
                   "storage of q, k, v, dout and results (burst, ring: on the wire)");
  add_partials_option(cmd, o->partials_dtype);
  add_timing_options(cmd, o->threads, o->repeats, o->warmup);
  cmd->add_option("--device", o->device,
                  "cpu, or cuda / cuda:N: every rank's tensors and passes on its GPU (cuda: local rank "
                  "modulo the GPUs, ranks sharing them beyond; messages through pinned host memory)")
      ->capture_default_str();
  cmd->add_option("--ranks-per-node", o->ranks_per_node, "double ring L (0: discover)")
      ->capture_default_str();
  add_ulysses_degree_option(cmd, o->ulysses_degree);
  add_usp_ring_option(cmd, o->usp_ring);
  cmd->add_option("--backward-side", o->backward_side, "auto|query|kv (burst)")->capture_default_str();
  cmd->add_flag("--no-overlap", o->no_overlap, "wait for each transfer before computing");
  cmd->add_option("--timeline", o->timeline,
                  "write per rank, pass and step of the timed repeats: compute (wall, thread CPU), wait, "
                  "copy seconds and bytes as JSON lines to this file (`burst report` draws them)");
  cmd->add_flag(
      "--no-return-overlap", o->no_return_overlap,
      "distflash: wait for the returned partials (O/lse, dQ, dK/dV) inside the step that made them");
  cmd->add_flag("--no-double-ring", o->no_double_ring, "flat ring even across nodes");
  cmd->add_option("--emulate-slow-rank", o->slow_ranks,
                  "emulate a slower core on this rank (repeatable; -1: the last rank): its step kernels "
                  "spin on after each call until they took --slow-factor times their CPU time (CPU device)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--slow-factor", o->slow_factor, "F >= 1 for --emulate-slow-rank")->capture_default_str();
  cmd->add_flag("--no-mask-aware", o->no_mask_aware,
                "burst, ring: every block circulates the whole ring (no mask-aware schedule)");
  cmd->add_option("--comm-timeout", o->comm_timeout,
                  "seconds without communication progress before the job aborts (0: never)")
      ->envname("BURST_COMM_TIMEOUT")
      ->capture_default_str();
  cmd->callback([o] { run_dist(*o); });
}

}  // namespace burst::bench
