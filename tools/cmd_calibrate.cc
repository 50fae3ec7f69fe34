// `burst calibrate` — measures this machine as the cost model sees it and writes a cluster spec:
// attention-kernel rates and per-call overhead (the Tiled kernel, timed on every rank at once so
// the ranks contend as they do in `burst bench`) — in fp32 and, where the dispatch rule gives every
// rank a bf16-operand path (AMX tiles, or vdpbf16ps on AMD), the bf16 speed-up of that path per
// pass (ClusterSpec::bf16_speedup_*) — STREAM-style copy bandwidth, and MPI
// point-to-point latency and bandwidth (comm layer, ping-pong): inside a node between its ranks 0
// and 1, and across nodes between rank 0 and the first rank of node 1.
// Run under mpirun with the rank count and threads per rank the benchmarks will use, e.g.
//   mpirun -n 2 --bind-to core burst calibrate --threads 1 -o calibrated.json
// One device of the spec = one rank. Nodes are the ones MPI sees (MPI_Comm_split_type SHARED,
// Communicator::node_topology: ranks node-contiguous): nodes and devices_per_node of the spec;
// on the emulated cluster (scripts/cluster.sh run, docs/multinode.md) the inter-node link is
// the emulated one, with its tc rate.
// This file: copy bandwidth, MPI links and collectives, the spec assembled and the command;
// the kernel's timing (rates, overhead, masking probe, bf16): cmd_calibrate_kernel.cc.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/cluster_spec_io.h"
#include "bench/harness.h"
#include "burst/comm.h"
#include "burst/cost_model.h"
#include "burst/dispatch.h"
#include "burst/error.h"
#include "cmd_calibrate_internal.h"
#include "commands.h"

namespace burst::cli {

namespace {

std::string seqs_text(const std::vector<std::int64_t>& seqs) {
  std::string out;
  for (std::int64_t S : seqs) out += (out.empty() ? "" : ",") + std::to_string(S);
  return out;
}

/// STREAM-style copy bandwidth (bytes read + written per second), best of 3, min over ranks.
double copy_bandwidth(const Communicator& comm) {
  std::vector<float> a(std::size_t{1} << 24, 1.0f), b(a.size(), 0.0f);  // 64 MiB each
  double best = 0;
  comm.barrier();
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::copy(a.begin(), a.end(), b.begin());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(a.size() * sizeof(float)) / s);
    a[static_cast<std::size_t>(i)] = b[static_cast<std::size_t>(i) + 1];  // keep the copy live
  }
  return -comm.all_reduce_max(-best);
}

/// Half the median round trip of `bytes` bytes between ranks a and b (others idle). Collective.
double ping_pong_seconds(const Communicator& comm, int a, int b, std::size_t bytes, int rounds) {
  std::vector<double> samples;
  comm.barrier();
  if (comm.rank() == a || comm.rank() == b) {
    const int peer = comm.rank() == a ? b : a;
    for (int i = 0; i < rounds + 2; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if (comm.rank() == a) {
        comm.isend(ByteBuffer(bytes, std::byte{1}), peer, 7).wait();
        comm.irecv(ByteBuffer(bytes), peer, 8).wait();
      } else {
        comm.irecv(ByteBuffer(bytes), peer, 7).wait();
        comm.isend(ByteBuffer(bytes, std::byte{1}), peer, 8).wait();
      }
      if (i >= 2)
        samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 2);
    }
  }
  const double mine = samples.empty() ? 0.0 : bench::summarize(samples).median;
  return comm.all_reduce_max(mine);
}

/// Median seconds for ranks a + i to send `bytes` bytes to b + i and hear a 4-byte ack, for
/// i < pairs, all pairs at once and in one direction (a node's devices all crossing to the next
/// node: whether they share one inter-node link), max over the pairs. Others idle. Collective.
double one_way_seconds(const Communicator& comm, int a, int b, std::size_t bytes, int rounds, int pairs) {
  const int me = comm.rank();
  const bool sender = me >= a && me < a + pairs, receiver = me >= b && me < b + pairs;
  return collective_seconds(
      comm,
      [&] {
        if (sender) {
          comm.isend(ByteBuffer(bytes, std::byte{1}), b + (me - a), 9).wait();
          comm.irecv(ByteBuffer(4), b + (me - a), 10).wait();
        } else if (receiver) {
          comm.irecv(ByteBuffer(bytes), a + (me - b), 9).wait();
          comm.isend(ByteBuffer(4, std::byte{1}), a + (me - b), 10).wait();
        }
      },
      rounds);
}

/// An all-gather and a reduce-scatter of 4 MiB blocks over `group`'s ranks (median of 3 after a
/// warm-up each, max over every rank of `world`: groups measuring at once give one verdict), and
/// the bandwidths that make cost::all_gather_seconds over the group (inter_node: across nodes,
/// else inside one) match them: `bandwidth` (the point-to-point one the model's charge used)
/// × (that charge less its `latency` terms) ÷ (the measured time less them). Collective over world.
struct CollectiveFit {
  double gather_seconds = 0, scatter_seconds = 0, gather_bandwidth = 0, scatter_bandwidth = 0;
  std::string text() const {
    return "all-gather " + std::to_string(gather_seconds * 1e3) + " ms, reduce-scatter " +
           std::to_string(scatter_seconds * 1e3) + " ms -> " + std::to_string(gather_bandwidth / 1e6) +
           " / " + std::to_string(scatter_bandwidth / 1e6) + " MB/s";
  }
};
CollectiveFit fit_collectives(const Communicator& world, const Communicator& group, const ClusterSpec& c,
                              bool inter_node, double bandwidth, double latency) {
  const int n = group.size();
  const std::int64_t words = std::int64_t{1} << 20;
  std::vector<float> block(static_cast<std::size_t>(words), 1.0f),
      whole(static_cast<std::size_t>(words) * static_cast<std::size_t>(n), 1.0f);
  CollectiveFit f;
  f.gather_seconds = world.all_reduce_max(collective_seconds(
      group,
      [&] { group.all_gather(std::as_bytes(std::span(block)), std::as_writable_bytes(std::span(whole))); },
      3));
  f.scatter_seconds = world.all_reduce_max(collective_seconds(
      group,
      [&] {
        group.reduce_scatter(whole.data(), std::vector<std::int64_t>(static_cast<std::size_t>(n), words),
                             block.data());
      },
      3));
  const double modelled = all_gather_seconds(c, n, static_cast<double>(words) * 4, inter_node) - latency;
  f.gather_bandwidth = bandwidth * modelled / std::max(f.gather_seconds - latency, 1e-9);
  f.scatter_bandwidth = bandwidth * modelled / std::max(f.scatter_seconds - latency, 1e-9);
  return f;
}

struct Link {
  double latency = 0, bandwidth = 0;  ///< seconds (8 B one way); bytes per second
};

/// The link between ranks a and b: latency from 8-byte ping-pongs, bandwidth from 4 MiB ones
/// (past the eager limit, bandwidth-bound) net of that latency. Collective.
Link measure_link(const Communicator& comm, int a, int b) {
  const std::size_t big = std::size_t{4} << 20;
  Link l;
  l.latency = ping_pong_seconds(comm, a, b, 8, 200);
  const double t_big = ping_pong_seconds(comm, a, b, big, 10);
  l.bandwidth = static_cast<double>(big) / std::max(t_big - l.latency, 1e-9);
  return l;
}

void run_calibrate(CalibrateOptions o) {
  const Communicator comm = Communicator::world(o.comm_timeout);
  const int P = comm.size();
  ClusterSpec c;
  c.name = o.name;
  const NodeTopology topo = comm.node_topology(0);  // collective; throws on non-contiguous ranks
  c.nodes = topo.nodes;
  c.devices_per_node = topo.ranks_per_node;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const int slots = static_cast<int>(std::max<long>(1, cpus / std::max(1, o.threads)));
  // One verdict for all ranks (CPU counts could differ between nodes): the timings stay matched.
  const bool shared_cores = comm.all_reduce_max(static_cast<std::int64_t>(slots < topo.ranks_per_node)) > 0;
  o.shared_cores = shared_cores;
  const KernelFit fwd = fit_lengths(comm, o, false), bwd = fit_lengths(comm, o, true);
  // Ranks sharing cores: the fits above carry the contention of a distributed pass into the
  // rates, but their per-call overheads scatter with the scheduler (2x between runs on 4 ranks
  // over 2 cores) and came out above one rank's alone. The model charges each call its solo
  // overhead and stretches it by the share of the slots (cost::simulate), so take the overheads
  // from a second fit with one rank per compute slot (the node's first `slots` ranks) computing
  // while the others sleep.
  // The masking probe below (a difference of two timings) runs that way too: with every rank
  // computing, the scheduler's noise swamped it.
  KernelFit solo_fwd = fwd, solo_bwd = bwd;
  CalibrateOptions solo = o;
  if (shared_cores) {
    solo.one_per_slot = true;
    solo.computes = comm.split_shared().rank() < slots;
    solo_fwd = fit_lengths(comm, solo, false);
    solo_bwd = fit_lengths(comm, solo, true);
  }
  // The kernel rate IS the attention rate: matmul_flops holds it and efficiencies are relative.
  c.matmul_flops = fwd.rate;
  c.attention_efficiency_forward = 1.0;
  c.attention_efficiency_backward = bwd.rate / fwd.rate;
  c.kernel_call_seconds = solo_fwd.overhead;
  c.kernel_call_seconds_backward = solo_bwd.overhead;
  // bf16 arithmetic: only where the dispatch rule gives every rank a bf16-operand path (AMX tiles
  // or vdpbf16ps; burst/dispatch.h) — one verdict for all ranks, so the collective timings below
  // stay matched; elsewhere bf16 is widened and computes at the fp32 rate. The speed-up is that of
  // the chosen path (bf16 requests run it: AttentionParams::isa = Auto).
  const PathChoice bf16_path = choose_path(detect_cpu_features(), DType::BF16, KernelPass::Forward);
  const bool bf16 = comm.all_reduce_max(bf16_operands(bf16_path.isa, DType::BF16) ? 0.0 : 1.0) == 0.0;
  if (bf16) {
    c.bf16_speedup_forward = bf16_speedup(comm, o, false);
    c.bf16_speedup_backward = bf16_speedup(comm, o, true);
  }
  // The Tiled forward's default tile (kForwardBq × kForwardBkv, src/kernels/attention_tiled.cc):
  // partial tiles are computed whole, so the model counts work per tile.
  c.kernel_tile_q = 96;
  c.kernel_tile_kv = 128;
  c.kernel_tile_q_backward = 64;  // kBackwardBq × kBackwardBkv, src/kernels/attention_tiled_backward.cc
  c.kernel_tile_kv_backward = 96;
  const std::int64_t probe_S = o.seqs[o.seqs.size() / 2];  // a middle length: cheap, not tiny
  const RowCost row_fwd = partial_row_line(comm, solo, c, probe_S, false);
  const RowCost row_bwd = partial_row_line(comm, solo, c, probe_S, true);
  c.partial_row_seconds = row_fwd.base;
  c.partial_row_seconds_per_dim = row_fwd.per_dim;
  c.partial_row_seconds_backward = row_bwd.base;
  c.partial_row_seconds_per_dim_backward = row_bwd.per_dim;
  c.memory_bandwidth = copy_bandwidth(comm);
  // More ranks on a node than its cores hold (× threads): the kernels above ran with every rank
  // of the node computing at once, each on slots/L of a core. The model wants one rank's solo
  // rates and the slots it shares (ClusterSpec::compute_slots_per_node), so scale back.
  std::string sharing_text;
  if (shared_cores) {
    const double share = static_cast<double>(slots) / topo.ranks_per_node;
    c.compute_slots_per_node = slots;
    c.matmul_flops /= share;
    sharing_text =
        "; " + std::to_string(topo.ranks_per_node) + " ranks per node on " + std::to_string(slots) +
        " compute slot(s) (" + std::to_string(cpus) + " CPUs / " + std::to_string(o.threads) +
        " thread(s)): kernel rates scaled to one rank alone; per-call overheads " +
        std::to_string(solo_fwd.overhead * 1e6) + " / " + std::to_string(solo_bwd.overhead * 1e6) +
        " us (fwd / bwd) and the masking probe timed with one rank per slot while the others sleep (" +
        std::to_string(solo_fwd.rate / 1e9) + " / " + std::to_string(solo_bwd.rate / 1e9) + " GFLOP/s there)";
  }
  c.memory_capacity =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE)) / P;
  const int L = topo.ranks_per_node;
  std::string inter_share_text, intra_collective_text;
  if (L >= 2) {
    const Link intra = measure_link(comm, 0, 1);
    c.intra_latency = intra.latency;
    c.intra_bandwidth = intra.bandwidth;
    // Collectives inside a node: over each node's ranks (every node at once, slowest node),
    // against the model's point-to-point charge.
    const CollectiveFit f =
        fit_collectives(comm, comm.split_shared(), c, false, c.intra_bandwidth, (L - 1) * c.intra_latency);
    c.intra_collective_bandwidth = f.gather_bandwidth;
    c.intra_reduce_scatter_bandwidth = f.scatter_bandwidth;
    intra_collective_text = "; 4 MiB blocks over each node's " + std::to_string(L) + " ranks: " + f.text() +
                            " per intra-node block";
  } else {
    c.intra_latency = 0;
    c.intra_bandwidth = 1e12;  // unused with one device per node
  }
  if (topo.nodes > 1) {
    const Link inter = measure_link(comm, 0, L);  // rank 0 of node 0 and of node 1
    c.inter_latency = inter.latency;
    c.inter_bandwidth = inter.bandwidth;
    if (L >= 2) {
      // Every device of node 0 crossing to node 1 at once: a per-pair bandwidth near the
      // single pair's means a link each; near 1/L of it, one link the node's devices share.
      const std::size_t big = std::size_t{4} << 20;
      const double t_one = one_way_seconds(comm, 0, L, big, 6, 1);
      const double t_all = one_way_seconds(comm, 0, L, big, 6, L);
      const double shared_bw = static_cast<double>(big) / std::max(t_all - inter.latency, 1e-9);
      const int links = static_cast<int>(std::lround(L * t_one / t_all));
      c.inter_links_per_node = links >= L ? 0 : std::max(links, 1);
      inter_share_text =
          "; " + std::to_string(L) + " pairs at once " + std::to_string(shared_bw / 1e6) + " MB/s each -> " +
          (c.inter_links_per_node == 0 ? std::string("a link per device")
                                       : std::to_string(c.inter_links_per_node) + " link(s) per node");
    }
    // Collectives across nodes: over every rank, each against what the model charges for it at
    // the point-to-point bandwidth (cost::all_gather_seconds; a reduce-scatter moves the same volume).
    const CollectiveFit f =
        fit_collectives(comm, comm, c, true, c.inter_bandwidth, (P - 1) * c.inter_latency);
    c.inter_collective_bandwidth = f.gather_bandwidth;
    c.inter_reduce_scatter_bandwidth = f.scatter_bandwidth;
    inter_share_text += "; 4 MiB blocks over all ranks: " + f.text() + " per inter-node stream";
  } else {
    c.inter_bandwidth = c.intra_bandwidth;  // one node: no inter-node link exists
    c.inter_latency = c.intra_latency;
  }
  std::ostringstream src;
  const std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  src << "burst calibrate " << when << ", " << P << " rank(s) x " << o.threads << " thread(s), load "
      << bench::load_average_1m() << "; kernel: Tiled full mask H=" << o.heads << " D=" << o.head_dim
      << " at S=" << seqs_text(o.seqs) << " (median of " << o.repeats
      << ", max over ranks, least squares on relative error): forward " << fwd.rate / 1e9 << " GFLOP/s + "
      << fwd.overhead * 1e6 << " us/call, backward " << bwd.rate / 1e9 << " GFLOP/s + " << bwd.overhead * 1e6
      << " us/call; bf16 operands: "
      << (bf16 ? "x" + std::to_string(c.bf16_speedup_forward) + " forward, x" +
                     std::to_string(c.bf16_speedup_backward) + " backward (" + bf16_path.path +
                     " path; median over the lengths of fp32/bf16 times taken back to back)"
               : "bf16 widened to fp32 on some rank (" + bf16_path.path + " here), fp32 rate")
      << "; per-element masking: ns per Partial-tile row forward " << row_cost_text(row_fwd) << ", backward "
      << row_cost_text(row_bwd) << " (causal probe on interleaved positions at S=" << probe_S
      << ", median of 3 each); copy bandwidth 2x64 MiB best of 3; "
      << "MPI ping-pong 8 B and 4 MiB, " << c.nodes << " node(s) x " << L << " rank(s)"
      << (L >= 2 ? ": intra ranks 0-1" : "") << (c.nodes > 1 ? ", inter ranks 0-" + std::to_string(L) : "")
      << intra_collective_text << inter_share_text << sharing_text;
  c.source = src.str();
  c.validate();
  if (comm.rank() == 0) print_cluster_spec(c, o.output);
}

}  // namespace

void print_cluster_spec(const ClusterSpec& c, const std::string& output) {
  const std::string text = bench::cluster_to_json(c).dump(2);
  std::cout << text << std::endl;
  if (!output.empty()) {
    std::ofstream f(output);
    BURST_CHECK(f.good(), InvalidArgument, "calibrate: cannot write ", output);
    f << text << "\n";
  }
}

void add_calibrate_command(CLI::App& app) {
  auto opt = std::make_shared<CalibrateOptions>();
  auto* cmd = app.add_subcommand(
      "calibrate", "measure kernel rates, memory and MPI links; write a cluster spec (run under mpirun)");
  cmd->add_option("--threads", opt->threads, "kernel threads per rank (as the benchmarks use)")
      ->capture_default_str();
  cmd->add_option("--heads", opt->heads, "heads of the timed kernel")->capture_default_str();
  cmd->add_option("--head-dim", opt->head_dim, "head dim of the timed kernel")->capture_default_str();
  cmd->add_option("--seqs", opt->seqs, "lengths of the kernel fit (>= 2)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--repeats", opt->repeats, "timed repeats per point")->capture_default_str();
  cmd->add_option("--name", opt->name, "name of the written spec")->capture_default_str();
  cmd->add_option("--output,-o", opt->output, "write the spec JSON here (rank 0)");
  cmd->add_option("--comm-timeout", opt->comm_timeout,
                  "seconds without communication progress before the job is aborted, naming the ranks "
                  "that never arrived (0: wait forever)")
      ->envname("BURST_COMM_TIMEOUT")
      ->capture_default_str();
  cmd->add_option(
         "--device", opt->device,
         "cpu (this machine's ranks, under mpirun) | cuda | cuda:N (this GPU's step kernels into the "
         "--cluster preset's spec; a CUDA build)")
      ->capture_default_str();
  cmd->add_option("--cluster", opt->cluster, "--device cuda: the preset the GPU's rates go into")
      ->capture_default_str();
  cmd->add_option("--gpu-seq", opt->gpu_seq, "--device cuda: S of the timed step kernels")
      ->capture_default_str();
  cmd->callback([opt] {
    if (opt->device == "cpu" || opt->device == "host") return run_calibrate(*opt);
    run_calibrate_gpu(GpuCalibrateOptions{opt->device, opt->cluster, opt->name, opt->output, opt->gpu_seq,
                                          opt->heads, opt->head_dim, opt->repeats});
  });
}

}  // namespace burst::cli
