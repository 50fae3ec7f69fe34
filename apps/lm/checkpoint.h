// apps/lm/checkpoint.h — self-checking checkpoint files in the safetensors layout.
//
// Format (https://github.com/huggingface/safetensors, "Format"): u64 little-endian N, then N
// bytes of JSON header (padded with spaces to a multiple of 8), then the tensors' raw
// little-endian data. The header maps each tensor name to {"dtype": "F32", "shape": [...],
// "data_offsets": [begin, end]} (byte offsets into the data section, in write order, no gaps) and
// "__metadata__" (string values only) to:
//   "format": "burst-lm/safetensors-1",
//   "burst":  the caller's header (model config, step, run, history) as JSON text,
//   "checksum": FNV-1a 64 (hex) of the "burst" text's bytes followed by the whole data section.
// Any safetensors reader loads the tensors (scripts/read_checkpoint.py does, with python3
// and torch alone). Written to <path>.tmp and renamed, so an interrupted save never replaces a
// good checkpoint with a torn one.
#pragma once

#include "torch_api.h"

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

/// Writes atomically. Throws Error(InvalidArgument) for a tensor that is not fp32, a duplicate or
/// reserved ("__metadata__") name, or when the file cannot be written.
void save_checkpoint(const std::filesystem::path& path, const Checkpoint& ckpt);

/// Reads and verifies the layout (header length, offsets contiguous and inside the file, dtype,
/// shapes) and the checksum. Throws Error(InvalidArgument) "corrupt checkpoint <path>: <what>" on
/// any mismatch, or when the file does not exist. Tensors come back in data order.
Checkpoint load_checkpoint(const std::filesystem::path& path);

/// The tensor named `name`, checked against `shape`. Throws Error(InvalidArgument) naming the
/// tensor and both shapes when absent or mismatched.
torch::Tensor checkpoint_tensor(const Checkpoint& ckpt, const std::string& name,
                                const std::vector<std::int64_t>& shape);

}  // namespace burst::lm
