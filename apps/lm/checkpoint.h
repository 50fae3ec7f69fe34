// apps/lm/checkpoint.h — self-checking checkpoint files.
//
// Format (little-endian): "BURSTLM\0" magic, u32 version, u64 header length, header JSON
// (caller's metadata plus "tensors": [{name, shape}]), the tensors' fp32 data in header order,
// then u64 FNV-1a 64 of every preceding byte. Written to <path>.tmp and renamed, so an
// interrupted save never replaces a good checkpoint with a torn one.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace burst::lm {

struct Checkpoint {
  nlohmann::json header;                                       ///< caller's metadata
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  ///< fp32, any shape
};

/// Writes atomically. Throws Error(InvalidArgument) when the file cannot be written.
void save_checkpoint(const std::filesystem::path& path, const Checkpoint& ckpt);

/// Reads and verifies magic, version, sizes and checksum. Throws Error(InvalidArgument)
/// "corrupt checkpoint <path>: <what>" on any mismatch, or when the file does not exist.
Checkpoint load_checkpoint(const std::filesystem::path& path);

/// The tensor named `name`, checked against `shape`. Throws Error(InvalidArgument) naming the
/// tensor and both shapes when absent or mismatched.
torch::Tensor checkpoint_tensor(const Checkpoint& ckpt, const std::string& name,
                                const std::vector<std::int64_t>& shape);

}  // namespace burst::lm
