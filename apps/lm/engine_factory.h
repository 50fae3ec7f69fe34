// apps/lm/engine_factory.h — builds the attention engine for one sequence (train.cc, eval.cc).
#pragma once

#include <memory>

#include "attention_fn.h"
#include "model.h"
#include "train.h"

namespace burst::lm {

/// Padded sequence length: S rounded up to a multiple of 4P, so every layout (contiguous,
/// striped: P; zigzag: 2P; balanced: 4P chunks) divides it. Padding is its own document with
/// zero loss weight.
std::int64_t padded_length(std::int64_t S, int P);

/// DistEngine over comm (Collective) or, for EngineKind::Local (P = 1 only), a LocalEngine over
/// positions [0, S_padded). With `seq_wise` it also attaches first_half(): the same engine kind
/// over [0, S_padded/2) with first_half_mask (seq-wise checkpointing, docs/algorithm.md §9.1).
/// Throws Error(InvalidArgument) for Local with P > 1; with seq_wise, for a layout other than
/// striped when P > 1 (only striping makes each rank's first local half the global first half)
/// and as first_half_mask. Same verdict on every rank (inputs are identical).

std::unique_ptr<AttentionEngine> make_engine(const RunOptions& run, const Communicator& comm,
                                             const ModelConfig& model, std::int64_t S_padded,
                                             const Mask& mask, bool seq_wise = false);

}  // namespace burst::lm
