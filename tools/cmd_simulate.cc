// `burst simulate` — the cost model from the command line: a cluster (preset or JSON file) and a
// workload in, every strategy's predicted time, bytes and memory out (ranked table or JSON lines).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "bench/cli_options.h"
#include "bench/cluster_spec_io.h"
#include "burst/cost_model.h"
#include "burst/error.h"
#include "commands.h"

namespace burst::cli {

namespace {

struct SimulateOptions {
  std::string cluster = "a100_nvlink_node";
  int nodes = 0, devices_per_node = 0;
  int layers = 1;
  std::int64_t batch = 1, seq = 0, heads = 32, kv_heads = 0, head_dim = 128, model_width = 0;
  bool whole_layer = false;
  std::int64_t ffn_width = 0;
  std::string mask = "causal", pass = "fwd_bwd", dtype = "bf16", strategy, layout, format = "table";
  std::string partials_dtype = "fp32";
  int ulysses_degree = 0;
  std::string usp_ring = "ring";
  bool no_double_ring = false;
  std::int64_t mask_resolution = 8192;
  std::string output;
  int cores_per_node = 0;  ///< > 0: rank the ranks x threads splits of this many cores
};

/// Largest length ≤ limit that divides S and is a multiple of 2P (every layout's divisor), or S.
std::int64_t pick_mask_length(std::int64_t S, std::int64_t limit, int P) {
  if (S <= limit) return S;
  for (std::int64_t len = limit; len >= 2LL * P; --len)
    if (S % len == 0 && len % (2LL * P) == 0) return len;
  return S;
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%.0f KiB", b / 1024.0);
  return buf;
}

void print_table(const ClusterSpec& c, const Workload& w, const std::vector<Estimate>& ranked,
                 std::int64_t mask_length) {
  std::printf(
      "cluster %s: %d node(s) x %d device(s); workload B=%lld S=%lld H=%lld H_kv=%lld D=%lld "
      "mask=%s pass=%s dtype=%s layers=%d (mask counted at %lld tokens); kernel rate x%.2f fwd, "
      "x%.2f bwd for the dtype\n",
      c.name.c_str(), c.nodes, c.devices_per_node, static_cast<long long>(w.B),
      static_cast<long long>(w.S_global), static_cast<long long>(w.H), static_cast<long long>(w.H_kv),
      static_cast<long long>(w.D), w.mask.describe().c_str(), to_string(w.pass),
      w.bytes_per_element == 2 ? "bf16" : "fp32", w.layers, static_cast<long long>(mask_length),
      w.bf16_arithmetic ? c.bf16_speedup_forward : 1.0, w.bf16_arithmetic ? c.bf16_speedup_backward : 1.0);
  const bool layer = w.whole_layer;
  if (layer)
    std::printf(
        "whole layer: model width h=%lld, SwiGLU width f=%lld; ms/layer = attention + linear + "
        "non-attention comm; bytes/dev include it\n",
        static_cast<long long>(w.model_width), static_cast<long long>(w.resolved_ffn_width()));
  std::printf("%-3s %-9s %-10s %11s %11s %11s %11s %9s %7s %10s %11s %11s  %s\n", "#", "strategy", "layout",
              "ms/layer", "attn ms", "compute ms", "exposed ms", "balance", "TF/dev", "bytes/dev",
              "memory/dev", "total s", "note");
  int rank = 0;
  for (const Estimate& e : ranked) {
    const std::string strat = to_string(e.candidate.strategy);
    if (!e.feasible) {
      std::printf("%-3s %-9s %-10s %11s  %s\n", "-", strat.c_str(), to_string(e.candidate.layout), "n/a",
                  e.reason.c_str());
      continue;
    }
    std::string note;
    if (e.ulysses_degree > 0) note += "u=" + std::to_string(e.ulysses_degree) + " ";
    if (!e.backward_side.empty()) note += "bwd=" + e.backward_side;
    // TF/dev: attention FLOPs per attention second, or (whole layer) all FLOPs per layer second.
    const double secs = layer ? e.layer.seconds : e.seconds;
    const double flops = layer ? e.flops + e.layer.linear_flops * c.devices() : e.flops;
    const double tflops = secs > 0 ? flops / secs / c.devices() / 1e12 : 0;
    const double bytes = static_cast<double>(layer ? e.layer.bytes_per_device : e.bytes_per_device);
    std::printf("%-3d %-9s %-10s %11.3f %11.3f %11.3f %11.3f %9.3f %7.1f %10s %11s %11.3f  %s\n", ++rank,
                strat.c_str(), to_string(e.candidate.layout), secs * 1e3, e.seconds * 1e3,
                e.compute_seconds * 1e3, e.exposed_comm_seconds * 1e3, e.balance, tflops,
                human_bytes(bytes).c_str(), human_bytes(static_cast<double>(e.memory_bytes)).c_str(),
                secs * w.layers, note.c_str());
  }
  if (rank > 0)
    std::printf("recommendation: %s on the %s layout\n", to_string(ranked[0].candidate.strategy),
                to_string(ranked[0].candidate.layout));
}

/// --cores-per-node: every ranks x threads split of the node's cores (rank_thread_splits), the
/// cluster's device taken as one single-threaded rank on one core; a table (or JSON lines, one
/// per split) and the recommended split.
DType partials_dtype(const SimulateOptions& o) {
  return bench::parse_partials_dtype(
      o.partials_dtype, o.strategy.empty() ? StrategyKind::Burst : strategy_from_string(o.strategy));
}

/// The workload of a record, the same keys in the per-strategy and the per-split records.
nlohmann::json workload_config(const SimulateOptions& o, const Workload& w, DType partials) {
  return {{"layers", w.layers},
          {"B", w.B},
          {"S_global", w.S_global},
          {"H", w.H},
          {"H_kv", w.H_kv},
          {"D", w.D},
          {"mask", o.mask},
          {"pass", to_string(w.pass)},
          {"dtype", o.dtype},
          {"partials_dtype", to_string(partials)},
          {"bf16_arithmetic", w.bf16_arithmetic},
          {"mask_length", w.mask_length},
          {"model_width", w.model_width},
          {"whole_layer", w.whole_layer},
          {"ffn_width", w.whole_layer ? w.resolved_ffn_width() : 0}};
}

void run_splits(const SimulateOptions& o, const ClusterSpec& c, const Workload& w,
                const std::vector<Candidate>& candidates, std::ostream* file, DType partials) {
  const std::vector<RankThreadSplit> splits = rank_thread_splits(c, w, o.cores_per_node, candidates);
  if (o.format != "jsonl")
    std::printf(
        "%d node(s) x %d cores, one device = one single-threaded rank of '%s'; workload S=%lld H=%lld "
        "H_kv=%lld D=%lld mask=%s pass=%s\n%-14s %8s %8s %-10s %-10s %11s %11s %11s\n",
        c.nodes, o.cores_per_node, c.name.c_str(), static_cast<long long>(w.S_global),
        static_cast<long long>(w.H), static_cast<long long>(w.H_kv), static_cast<long long>(w.D),
        o.mask.c_str(), to_string(w.pass), "ranks x thr", "eff fwd", "eff bwd", "strategy", "layout",
        "ms/layer", "compute ms", "exposed ms");
  for (const RankThreadSplit& s : splits) {
    nlohmann::json j = s.best.feasible ? bench::estimate_to_json(s.best) : nlohmann::json::object();
    j["bench"] = "simulate_split";
    j["cluster"] = c.name;
    j["nodes"] = c.nodes;
    j["cores_per_node"] = o.cores_per_node;
    j["ranks_per_node"] = s.ranks_per_node;
    j["threads"] = s.threads;
    j["efficiency_forward"] = s.efficiency_forward;
    j["efficiency_backward"] = s.efficiency_backward;
    j["feasible"] = s.best.feasible;
    j["recommended"] = &s == &splits.front() && s.best.feasible;
    j["config"] = workload_config(o, w, partials);
    if (o.format == "jsonl") std::cout << j.dump() << "\n";
    if (file) *file << j.dump() << "\n";
    if (o.format == "jsonl") continue;
    const std::string split = std::to_string(s.ranks_per_node) + " x " + std::to_string(s.threads);
    if (!s.best.feasible) {
      std::printf("%-14s %8.3f %8.3f  n/a: %s\n", split.c_str(), s.efficiency_forward, s.efficiency_backward,
                  s.best.reason.c_str());
      continue;
    }
    std::printf("%-14s %8.3f %8.3f %-10s %-10s %11.3f %11.3f %11.3f\n", split.c_str(), s.efficiency_forward,
                s.efficiency_backward, to_string(s.best.candidate.strategy),
                to_string(s.best.candidate.layout), s.seconds * 1e3, s.best.compute_seconds * 1e3,
                s.best.exposed_comm_seconds * 1e3);
  }
  if (o.format != "jsonl" && !splits.empty() && splits.front().best.feasible)
    std::printf("recommendation: %d ranks x %d threads per node, %s on the %s layout\n",
                splits.front().ranks_per_node, splits.front().threads,
                to_string(splits.front().best.candidate.strategy),
                to_string(splits.front().best.candidate.layout));
}

void run_simulate(const SimulateOptions& o) {
  ClusterSpec c = bench::load_cluster(o.cluster);
  if (o.nodes > 0) c.nodes = o.nodes;
  if (o.devices_per_node > 0) c.devices_per_node = o.devices_per_node;
  BURST_CHECK(o.seq > 0, InvalidArgument, "--seq must be > 0, got ", o.seq);
  BURST_CHECK(o.dtype == "bf16" || o.dtype == "fp32", InvalidArgument, "--dtype must be bf16 or fp32, got ",
              o.dtype);
  Workload w;
  w.layers = o.layers;
  w.B = o.batch;
  w.S_global = o.seq;
  w.H = o.heads;
  w.H_kv = o.kv_heads > 0 ? o.kv_heads : o.heads;
  w.D = o.head_dim;
  w.model_width = o.model_width > 0 ? o.model_width : (o.whole_layer ? w.H * w.D : 0);
  w.whole_layer = o.whole_layer;
  w.ffn_width = o.ffn_width;
  w.pass = pass_from_string(o.pass);
  w.bytes_per_element = o.dtype == "bf16" ? 2 : 4;
  w.bf16_arithmetic = o.dtype == "bf16";  // kernel rates × the spec's bf16_speedup_* (1 for GPU presets)
  // Ranking every strategy: the option applies to burst and ring, the others' partials stay fp32.
  const DType partials = partials_dtype(o);
  w.partial_bytes_per_element = static_cast<int>(dtype_size(partials));
  // With --cores-per-node the largest P is nodes x cores: a mask length splitting into it splits
  // into every smaller split's P too.
  const int max_P = o.cores_per_node > 0 ? c.nodes * o.cores_per_node : c.devices();
  w.mask_length = pick_mask_length(o.seq, o.mask_resolution, max_P);
  w.mask = make_benchmark_mask(mask_type_from_string(o.mask), w.mask_length);
  std::vector<Candidate> only;
  if (!o.strategy.empty()) {
    Candidate cand;
    cand.strategy = strategy_from_string(o.strategy);
    cand.layout = o.layout.empty() ? LayoutKind::Zigzag : layout_from_string(o.layout);
    cand.ulysses_degree = o.ulysses_degree;
    cand.double_ring = !o.no_double_ring;
    cand.usp_ring = usp_ring_from_string(o.usp_ring);
    only.push_back(cand);
  }
  std::unique_ptr<std::ofstream> file;
  if (!o.output.empty()) file = std::make_unique<std::ofstream>(o.output, std::ios::app);
  if (o.cores_per_node > 0) {
    run_splits(o, c, w, only, file.get(), partials);
    std::cout.flush();
    return;
  }
  const std::vector<Estimate> ranked =
      only.empty() ? rank_strategies(c, w) : std::vector<Estimate>{estimate(c, w, only[0])};
  for (const Estimate& e : ranked) {
    nlohmann::json j = bench::estimate_to_json(e);
    j["cluster"] = c.name;
    j["nodes"] = c.nodes;
    j["devices_per_node"] = c.devices_per_node;
    j["config"] = workload_config(o, w, partials);
    if (o.format == "jsonl") std::cout << j.dump() << "\n";
    if (file) *file << j.dump() << "\n";
  }
  if (o.format != "jsonl") print_table(c, w, ranked, w.mask_length);
  std::cout.flush();
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto opt = std::make_shared<SimulateOptions>();
  auto* cmd = app.add_subcommand("simulate",
                                 "predict every strategy's time, bytes and memory on a cluster (cost model)");
  cmd->add_option("--cluster", opt->cluster,
                  "preset name (<share dir>/clusters/*.json, `burst info`) or a spec file")
      ->capture_default_str();
  cmd->add_option("--nodes", opt->nodes, "override the number of nodes");
  cmd->add_option("--devices-per-node", opt->devices_per_node, "override devices per node");
  cmd->add_option("--layers", opt->layers, "layers (totals = per-layer x layers)")->capture_default_str();
  cmd->add_option("--batch,-B", opt->batch, "batch B")->capture_default_str();
  cmd->add_option("--seq,-S", opt->seq, "global sequence length S_global")->required();
  cmd->add_option("--heads,-H", opt->heads, "query heads H")->capture_default_str();
  cmd->add_option("--kv-heads", opt->kv_heads, "KV heads H_kv (0: = H)");
  cmd->add_option("--head-dim,-D", opt->head_dim, "head dim D")->capture_default_str();
  cmd->add_option("--model-width", opt->model_width,
                  "model width h: headpar is then charged Megatron SP's traffic of X [S/P, h], the layer "
                  "as `burst train --strategy tp` runs it (0: headpar's own Q, K, V / O traffic; with "
                  "--whole-layer 0 means H*D)");
  cmd->add_flag("--whole-layer", opt->whole_layer,
                "score the whole transformer layer: linear FLOPs, weights, TP's MLP traffic, the "
                "weight-gradient all-reduce; rank by layer time");
  cmd->add_option("--ffn-width", opt->ffn_width, "SwiGLU hidden width f (0: 8h/3 rounded up to 256)");
  cmd->add_option("--mask", opt->mask, "one of the 14 benchmark masks")->capture_default_str();
  cmd->add_option("--pass", opt->pass, "fwd | bwd | fwd_bwd")->capture_default_str();
  bench::add_dtype_option(cmd, opt->dtype, "bf16|fp32", "tensor payloads and kernel rates");
  bench::add_partials_option(cmd, opt->partials_dtype);
  cmd->add_option("--mask-resolution", opt->mask_resolution,
                  "count visible pairs at most at this length, scaled to S (exact for full/causal)")
      ->capture_default_str();
  cmd->add_option("--strategy", opt->strategy, "score only this strategy");
  cmd->add_option("--layout", opt->layout, "layout for --strategy (default zigzag)");
  bench::add_ulysses_degree_option(cmd, opt->ulysses_degree);
  bench::add_usp_ring_option(cmd, opt->usp_ring);
  cmd->add_flag("--no-double-ring", opt->no_double_ring, "with --strategy: the flat ring even across nodes");
  cmd->add_option("--format", opt->format, "table | jsonl")->capture_default_str();
  cmd->add_option("--cores-per-node", opt->cores_per_node,
                  "rank every ranks x threads split of this many cores per node (the cluster's device = "
                  "one single-threaded rank on one core; with --strategy: that strategy only) and "
                  "recommend one");
  cmd->add_option("--output,-o", opt->output, "append JSON lines to this file");
  cmd->callback([opt] { run_simulate(*opt); });
}

}  // namespace burst::cli
