// bench/cluster_spec_io.h — ClusterSpec <-> JSON, presets from <share dir>/clusters/, and the
// JSON line of one cost-model Estimate. Shared by the matrix benchmark's predicted-vs-measured
// output and by `burst simulate` and `burst calibrate`.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "burst/cost_model.h"

namespace burst::bench {

/// The data directory of the running executable, found relative to its own binary:
/// <dir of the binary>/../share/burst. Installed: <prefix>/bin/burst -> <prefix>/share/burst;
/// build tree: <build>/tools/burst -> <build>/share/burst (staged by tools/CMakeLists.txt).
/// Holds clusters/*.json (presets) and report.py. Not collective; no I/O beyond readlink.
std::filesystem::path share_dir();

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

}  // namespace burst::bench
