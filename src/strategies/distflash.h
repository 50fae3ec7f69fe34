// src/strategies/distflash.h — DistFlashAttn's load-balanced causal schedule, executed (internal).
//
// Execution of DistFlashAttn's schedule (the schedule itself, its byte formulas and the
// support check are pure: plan_strategies.h). docs/strategies.md §distflash.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "device/device.h"
#include "kernels/step.h"
#include "plan_strategies.h"
#include "strategies/staging.h"
#include "strategies/step_log.h"

namespace burst::strategies {

struct PassTimes;

/// Which transfers of a pass overlap compute. inputs: the next step's inputs travel while this
/// step computes (kernels poll MPI between tiles); false waits for them first (the no-overlap
/// ablation, DistConfig::overlap). returns (only with inputs): the partials a helper returns
/// travel during the next step's compute; false waits for them at the end of the step that
/// produced them (DistConfig::return_overlap). Either way partials merge at the same point, so
/// the results are bitwise the same.
struct FlashOverlap {
  bool inputs = true, return_partials = true;
  bool returns() const { return inputs && return_partials; }
};

/// Forward under the schedule on the contiguous layout: q [B,c,H,D], k, v [B,c,H_kv,D] (chunk
/// comm.rank()), out like q, lse [B,H,c] contiguous. `base` carries scale, mask (resolved over
/// S_global = P·c) and kernel; each block's positions are taken from `positions` (0 .. P·c − 1,
/// in the device's memory), and base.host_q_pos, when set, is the same array in host memory
/// (the steps' host mirrors: kernels.h, KernelArgs::host_*).
/// Collective over comm (P = s.P ranks). Memory O(c): own payloads, one step's inbox, one
/// partial buffer. Every tensor is in st.device()'s memory; messages are staged through `st`
/// (src/strategies/staging.h: an own chunk copied out once and sent from its wire to every rank
/// that needs it, a received message copied in once, a returned partial copied out once).
void distflash_forward(Stager& st, const Communicator& comm, const DistFlashSchedule& s,
                       const kernels::KernelParams& base, const std::int64_t* positions, const TensorView& q,
                       const TensorView& k, const TensorView& v, const TensorView& out, const TensorView& lse,
                       FlashOverlap ov, PassTimes& times);
/// Backward: dq like q, dk, dv like k (overwritten). Collective.
void distflash_backward(Stager& st, const Communicator& comm, const DistFlashSchedule& s,
                        const kernels::KernelParams& base, const std::int64_t* positions,
                        const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& lse, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv, FlashOverlap ov, PassTimes& times);

}  // namespace burst::strategies
