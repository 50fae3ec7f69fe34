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
/// positions [0, S_padded). Throws Error(InvalidArgument) for Local with P > 1.
std::unique_ptr<AttentionEngine> make_engine(const RunOptions& run, const Communicator& comm,
                                             const ModelConfig& model, std::int64_t S_padded,
                                             const Mask& mask);

}  // namespace burst::lm
