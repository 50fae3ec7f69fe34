// tools/cluster_spec_io.h — ClusterSpec <-> JSON, presets from share/clusters/, and the
// JSON line of one cost-model Estimate. Shared by `burst simulate`, `burst calibrate` and the
// matrix benchmark's predicted-vs-measured output.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "burst/cost_model.h"

namespace burst::cli {

/// Reads a spec: every numeric field of ClusterSpec by its C++ name; "sources" (object of
/// field → text) is folded into ClusterSpec::source. Missing fields keep their defaults.
/// Throws: Error(InvalidArgument) naming the field on a type mismatch.
ClusterSpec cluster_from_json(const nlohmann::json& j);
nlohmann::json cluster_to_json(const ClusterSpec& c);

/// `name_or_path`: an existing file, or a preset name looked up as
/// <share dir>/clusters/<name>.json. Throws: Error(InvalidArgument) listing the presets.
ClusterSpec load_cluster(const std::string& name_or_path);
/// Preset names found in <share dir>/clusters/.
std::vector<std::string> cluster_presets();

/// One JSON line per estimate: strategy, layout, seconds, bytes_per_device, memory_bytes, ...
nlohmann::json estimate_to_json(const Estimate& e);

}  // namespace burst::cli
