// apps/lm/train.h — `burst train`: the long-context training loop and `burst eval`.
//
// Training: one window of seq_len tokens of the KJV per step (seeded choice), split across the
// ranks by burst's layout, document-causal mask over the books inside the window; AdamW with
// warm-up + cosine decay and global-norm clipping; weight gradients all-reduced (sum) over the
// ranks, so every rank holds identical weights (under tensor parallelism, model_tp.h, each rank
// holds its shards and only the replicated weights' gradients are summed). Rank 0 writes the checkpoint, a
// JSON-lines log and a loss-curve PNG. A run resumes from <out>/checkpoint.safetensors without losing steps
// and ends bitwise equal to an uninterrupted run: window choice depends only on (seed, step), and the
// checkpoint holds the weights, AdamW's moments and step count, the history and the time budget's
// fitted step count (tests/multinode_faults.sh resume kills a rank mid-run to show it).
// Evaluation: the whole KJV as ONE sequence (document-causal over its 66 books), balanced
// layout; perplexity overall and per book, with a single-rank self-check on sampled books.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "burst/comm.h"
#include "burst/strategy.h"
#include "checkpoint.h"
#include "data.h"
#include "model.h"
#include "options.h"

namespace burst::lm {

/// Loads a `burst train` checkpoint and checks that it was trained on `corpus` (read from
/// data_dir). Throws Error(InvalidArgument) for a corrupt file, another kind of checkpoint or a
/// different token cache (the message names both checksums). Not collective.
Checkpoint load_lm_checkpoint(const std::filesystem::path& path, const Corpus& corpus,
                              const std::filesystem::path& data_dir);
/// The model the checkpoint describes, with its weights. Throws as checkpoint_tensor.
Model model_from_checkpoint(const Checkpoint& ckpt);

}  // namespace burst::lm
