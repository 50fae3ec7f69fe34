// `burst plan`: prints the pure plan of one distributed attention (no MPI traffic; any rank
// count can be planned from one process) as a table or as JSON.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/cli_options.h"
#include "burst/error.h"
#include "burst/plan.h"
#include "commands.h"

namespace burst::cli {

namespace {

struct PlanOptions {
  std::string strategy = "burst", layout = "zigzag", mask = "causal", backward_side = "auto", dtype = "fp32";
  std::string usp_ring = "ring", partials_dtype = "fp32";
  int ranks = 2, ranks_per_node = 0, ulysses_degree = 0;
  std::int64_t batch = 1, seq = 4096, heads = 8, kv_heads = 0, dim = 64;
  bool json = false, no_mask_aware = false;
};

nlohmann::json pass_json(const PassPlan& p) {
  nlohmann::json steps = nlohmann::json::array();
  for (const PlanStep& s : p.steps)
    steps.push_back({{"payload", s.payload},
                     {"link", s.link},
                     {"partition", s.partition},
                     {"send_to", s.send_to},
                     {"bytes_sent", s.bytes_sent},
                     {"visible_pairs", s.visible_pairs}});
  return {{"side", p.side},
          {"mask_aware", p.mask_aware},
          {"bytes_sent", p.bytes_sent},
          {"visible_pairs", p.visible_pairs},
          {"peak_buffer_bytes", p.peak_buffer_bytes},
          {"balance", p.balance()},
          {"steps", steps}};
}

void run_plan(const PlanOptions& o) {
  DistConfig cfg;
  cfg.strategy = strategy_from_string(o.strategy);
  cfg.layout = layout_from_string(o.layout);
  cfg.ulysses_degree = o.ulysses_degree;
  cfg.mask_aware = !o.no_mask_aware;
  cfg.partials_dtype = bench::parse_partials_dtype(o.partials_dtype, cfg.strategy);
  cfg.usp_ring = usp_ring_from_string(o.usp_ring);
  if (o.backward_side == "query")
    cfg.backward_side = BackwardSide::QuerySide;
  else if (o.backward_side == "kv")
    cfg.backward_side = BackwardSide::KvSide;
  else
    BURST_CHECK(o.backward_side == "auto", InvalidArgument, "--backward-side '", o.backward_side,
                "' (valid: auto, query, kv)");
  ProblemShape shape{o.batch, o.seq, o.heads, o.kv_heads > 0 ? o.kv_heads : o.heads, o.dim};
  shape.dtype = parse_dtype(o.dtype);
  const Mask mask = make_benchmark_mask(mask_type_from_string(o.mask), o.seq);
  const int L = o.ranks_per_node > 0 ? o.ranks_per_node : o.ranks;
  const Plan plan = Plan::make(cfg, shape, mask, o.ranks, L);
  if (!o.json) {
    std::cout << plan.table();
    return;
  }
  nlohmann::json j = {{"strategy", o.strategy},
                      {"layout", o.layout},
                      {"ranks", o.ranks},
                      {"nodes", plan.nodes()},
                      {"ranks_per_node", plan.ranks_per_node()},
                      {"B", shape.B},
                      {"S_global", shape.S_global},
                      {"H", shape.H},
                      {"H_kv", shape.H_kv},
                      {"D", shape.D},
                      {"dtype", to_string(shape.dtype)},
                      {"partials_dtype", to_string(cfg.partials_dtype)},
                      {"mask", o.mask},
                      {"positions", plan.layout().positions},
                      {"forward", pass_json(plan.forward())},
                      {"backward", pass_json(plan.backward())}};
  std::cout << j.dump() << std::endl;
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand("plan", "print the pure plan of a distributed attention (table or --json)");
  cmd->add_option("--strategy", o->strategy, "burst|ring|allgather|ulysses|usp|distflash|headpar")
      ->capture_default_str();
  cmd->add_option("--layout", o->layout, "contiguous|zigzag|striped|balanced")->capture_default_str();
  cmd->add_option("--ranks", o->ranks, "P")->capture_default_str();
  cmd->add_option("--ranks-per-node", o->ranks_per_node,
                  "L for the burst / ring / usp double ring (0: one node)");
  bench::add_ulysses_degree_option(cmd, o->ulysses_degree);
  bench::add_usp_ring_option(cmd, o->usp_ring);
  cmd->add_option("--seq", o->seq, "S_global")->capture_default_str();
  bench::add_shape_options(cmd, o->batch, o->heads, o->kv_heads, o->dim);
  cmd->add_option("--mask", o->mask, "benchmark mask name")->capture_default_str();
  cmd->add_option("--backward-side", o->backward_side, "auto|query|kv")->capture_default_str();
  bench::add_dtype_option(cmd, o->dtype, "fp32|bf16|fp16", "storage of q, k, v, dout (bytes per dtype)");
  bench::add_partials_option(cmd, o->partials_dtype);
  cmd->add_flag("--json", o->json, "one JSON object instead of the table");
  cmd->add_flag("--no-mask-aware", o->no_mask_aware, "burst, ring: plan the full ring even for sparse masks");
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace burst::cli
