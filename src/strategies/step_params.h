// src/strategies/step_params.h — what a strategy step hands the kernels (internal): the
// kernel parameters of a step and the plan's per-rank positions and visible pairs.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/kernels.h"
#include "strategies/strategy_impl.h"

namespace burst::strategies {

/// The global positions of rank `rank`'s tokens in the plan's layout [S_local].
const std::vector<std::int64_t>& rank_positions(const Setup& setup, int rank);
/// Visible (q, k) pairs per (batch, head) between rank q_rank's queries and rank kv_rank's keys
/// (Plan::block_pairs).
std::int64_t block_pairs(const Setup& setup, int q_rank, int kv_rank);

/// Kernel parameters of a step for the internal kernel entry (kernels/step.h): queries at q_pos,
/// keys at kv_pos (global, increasing), the mask resolved once per DistAttention
/// (setup.resolved, over (S_global, S_global)); the progress hook only when cfg.overlap (not
/// copied: it must outlive the kernel calls made with the result). Cheap: no validation, no
/// copy of the mask.
kernels::KernelParams step_params(const Setup& setup, const std::int64_t* q_pos, const std::int64_t* kv_pos,
                                  const std::function<void()>* progress);

}  // namespace burst::strategies
