#include "bench/cluster_spec_io.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "burst/error.h"

namespace burst::bench {

namespace {

template <typename T>
void read_field(const nlohmann::json& j, const char* key, T& out) {
  if (!j.contains(key)) return;
  try {
    out = j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    BURST_FAIL(InvalidArgument, "cluster spec field '", key, "': ", e.what());
  }
}

std::filesystem::path clusters_dir() { return share_dir() / "clusters"; }

}  // namespace

std::filesystem::path share_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return std::filesystem::path("share") / "burst";
  return (exe.parent_path().parent_path() / "share" / "burst").lexically_normal();
}

ClusterSpec cluster_from_json(const nlohmann::json& j) {
  ClusterSpec c;
  read_field(j, "name", c.name);
  read_field(j, "nodes", c.nodes);
  read_field(j, "devices_per_node", c.devices_per_node);
  read_field(j, "matmul_flops", c.matmul_flops);
  read_field(j, "attention_efficiency_forward", c.attention_efficiency_forward);
  read_field(j, "attention_efficiency_backward", c.attention_efficiency_backward);
  read_field(j, "bf16_speedup_forward", c.bf16_speedup_forward);
  read_field(j, "bf16_speedup_backward", c.bf16_speedup_backward);
  read_field(j, "kernel_call_seconds", c.kernel_call_seconds);
  read_field(j, "kernel_call_seconds_backward", c.kernel_call_seconds_backward);
  read_field(j, "partial_row_seconds", c.partial_row_seconds);
  read_field(j, "partial_row_seconds_backward", c.partial_row_seconds_backward);
  read_field(j, "partial_row_seconds_per_dim", c.partial_row_seconds_per_dim);
  read_field(j, "partial_row_seconds_per_dim_backward", c.partial_row_seconds_per_dim_backward);
  read_field(j, "linear_efficiency", c.linear_efficiency);
  read_field(j, "kernel_tile_q", c.kernel_tile_q);
  read_field(j, "kernel_tile_kv", c.kernel_tile_kv);
  read_field(j, "kernel_tile_q_backward", c.kernel_tile_q_backward);
  read_field(j, "kernel_tile_kv_backward", c.kernel_tile_kv_backward);
  read_field(j, "thread_scaling_forward", c.thread_scaling_forward);
  read_field(j, "thread_scaling_backward", c.thread_scaling_backward);
  read_field(j, "memory_bandwidth", c.memory_bandwidth);
  read_field(j, "memory_capacity", c.memory_capacity);
  read_field(j, "intra_bandwidth", c.intra_bandwidth);
  read_field(j, "intra_latency", c.intra_latency);
  read_field(j, "inter_bandwidth", c.inter_bandwidth);
  read_field(j, "inter_latency", c.inter_latency);
  read_field(j, "inter_links_per_node", c.inter_links_per_node);
  read_field(j, "inter_collective_bandwidth", c.inter_collective_bandwidth);
  read_field(j, "inter_reduce_scatter_bandwidth", c.inter_reduce_scatter_bandwidth);
  read_field(j, "intra_collective_bandwidth", c.intra_collective_bandwidth);
  read_field(j, "intra_reduce_scatter_bandwidth", c.intra_reduce_scatter_bandwidth);
  read_field(j, "compute_slots_per_node", c.compute_slots_per_node);
  if (j.contains("sources") && j.at("sources").is_object()) {
    for (const auto& [key, value] : j.at("sources").items())
      c.source += key + ": " + (value.is_string() ? value.get<std::string>() : value.dump()) + "\n";
  } else {
    read_field(j, "source", c.source);
  }
  return c;
}

nlohmann::json cluster_to_json(const ClusterSpec& c) {
  return {{"name", c.name},
          {"nodes", c.nodes},
          {"devices_per_node", c.devices_per_node},
          {"matmul_flops", c.matmul_flops},
          {"attention_efficiency_forward", c.attention_efficiency_forward},
          {"attention_efficiency_backward", c.attention_efficiency_backward},
          {"bf16_speedup_forward", c.bf16_speedup_forward},
          {"bf16_speedup_backward", c.bf16_speedup_backward},
          {"kernel_call_seconds", c.kernel_call_seconds},
          {"kernel_call_seconds_backward", c.kernel_call_seconds_backward},
          {"partial_row_seconds", c.partial_row_seconds},
          {"partial_row_seconds_backward", c.partial_row_seconds_backward},
          {"partial_row_seconds_per_dim", c.partial_row_seconds_per_dim},
          {"partial_row_seconds_per_dim_backward", c.partial_row_seconds_per_dim_backward},
          {"linear_efficiency", c.linear_efficiency},
          {"kernel_tile_q", c.kernel_tile_q},
          {"kernel_tile_kv", c.kernel_tile_kv},
          {"kernel_tile_q_backward", c.kernel_tile_q_backward},
          {"kernel_tile_kv_backward", c.kernel_tile_kv_backward},
          {"thread_scaling_forward", c.thread_scaling_forward},
          {"thread_scaling_backward", c.thread_scaling_backward},
          {"memory_bandwidth", c.memory_bandwidth},
          {"memory_capacity", c.memory_capacity},
          {"intra_bandwidth", c.intra_bandwidth},
          {"intra_latency", c.intra_latency},
          {"inter_bandwidth", c.inter_bandwidth},
          {"inter_latency", c.inter_latency},
          {"inter_links_per_node", c.inter_links_per_node},
          {"inter_collective_bandwidth", c.inter_collective_bandwidth},
          {"inter_reduce_scatter_bandwidth", c.inter_reduce_scatter_bandwidth},
          {"intra_collective_bandwidth", c.intra_collective_bandwidth},
          {"intra_reduce_scatter_bandwidth", c.intra_reduce_scatter_bandwidth},
          {"compute_slots_per_node", c.compute_slots_per_node},
          {"source", c.source}};
}

std::vector<std::string> cluster_presets() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(clusters_dir(), ec))
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

ClusterSpec load_cluster(const std::string& name_or_path) {
  std::filesystem::path path(name_or_path);
  if (!std::filesystem::is_regular_file(path)) path = clusters_dir() / (name_or_path + ".json");
  if (!std::filesystem::is_regular_file(path)) {
    std::string list;
    for (const auto& n : cluster_presets()) list += " " + n;
    BURST_FAIL(InvalidArgument, "cluster '", name_or_path, "' is neither a file nor a preset; presets:",
               list.empty() ? " (none found in " + clusters_dir().string() + ")" : list);
  }
  std::ifstream in(path);
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    BURST_FAIL(InvalidArgument, "cluster spec ", path.string(), ": ", e.what());
  }
  return cluster_from_json(j);
}

nlohmann::json estimate_to_json(const Estimate& e) {
  nlohmann::json j = {{"strategy", to_string(e.candidate.strategy)},
                      {"layout", to_string(e.candidate.layout)},
                      {"feasible", e.feasible},
                      {"seconds", e.seconds},
                      {"bytes_per_device", e.bytes_per_device},
                      {"memory_bytes", e.memory_bytes},
                      {"compute_seconds", e.compute_seconds},
                      {"exposed_comm_seconds", e.exposed_comm_seconds},
                      {"balance", e.balance},
                      {"flops", e.flops}};
  if (!e.feasible) j["reason"] = e.reason;
  if (e.ulysses_degree > 0) {
    j["ulysses_degree"] = e.ulysses_degree;
    j["usp_ring"] = to_string(e.candidate.usp_ring);
  }
  if (!e.backward_side.empty()) j["backward_side"] = e.backward_side;
  auto pass = [](const PassEstimate& p) {
    nlohmann::json steps = nlohmann::json::array();
    for (const StepEstimate& s : p.steps)
      steps.push_back({{"compute_max", s.compute_max},
                       {"compute_mean", s.compute_mean},
                       {"transfer", s.transfer},
                       {"inter_node", s.inter_node}});
    return nlohmann::json{{"seconds", p.seconds},
                          {"compute_seconds", p.compute_seconds},
                          {"exposed_comm_seconds", p.exposed_comm_seconds},
                          {"balance", p.balance},
                          {"bytes_per_device", p.bytes_per_device},
                          {"memory_bytes", p.memory_bytes},
                          {"steps", steps}};
  };
  if (e.feasible && e.layer.seconds > 0)
    j["layer"] = {{"seconds", e.layer.seconds},
                  {"linear_flops", e.layer.linear_flops},
                  {"linear_seconds", e.layer.linear_seconds},
                  {"comm_seconds", e.layer.comm_seconds},
                  {"comm_bytes", e.layer.comm_bytes},
                  {"weight_bytes", e.layer.weight_bytes},
                  {"bytes_per_device", e.layer.bytes_per_device}};
  if (e.feasible && e.forward.seconds > 0) j["forward"] = pass(e.forward);
  if (e.feasible && e.backward.seconds > 0) j["backward"] = pass(e.backward);
  return j;
}

}  // namespace burst::bench
