// burst/plan.h — pure planning: who owns which global tokens and what moves at each step.
//
// Owns: sequence layouts (contiguous, zigzag, striped, balanced) and the per-strategy plan
// (steps, payloads, bytes) that strategies execute, the cost model scores and `burst plan`
// prints. Invariants: computed without MPI, identical on every rank for identical inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "burst/mask.h"
#include "burst/tensor.h"

namespace burst {

enum class LayoutKind : std::uint8_t { Contiguous, Zigzag, Striped, Balanced };
const char* to_string(LayoutKind kind) noexcept;
LayoutKind layout_from_string(const std::string& name);   ///< Throws Error(InvalidArgument)

/// Assignment of the S_global tokens to P ranks. positions[r] is increasing.
struct SequenceLayout {
  LayoutKind kind = LayoutKind::Contiguous;
  int P = 1;
  std::int64_t S_global = 0;
  std::vector<std::vector<std::int64_t>> positions;
};

/// Builds a layout. zigzag: 2P chunks, rank r holds chunks r and 2P−1−r; striped: token t on
/// rank t mod P; balanced: contiguous chunks assigned so per-rank visible work under `mask`
/// is even. Throws Error(InvalidArgument) when S_global is not divisible as the layout needs
/// (contiguous/striped: P; zigzag: 2P).
SequenceLayout make_layout(LayoutKind kind, int P, std::int64_t S_global, const Mask& mask = {});

/// Copies rank `rank`'s tokens from a global BSHD tensor [B,S_global,H,D] into a local one
/// [B,S_local,H,D] (shard) and back (unshard). Not collective; pure.
void shard(const SequenceLayout& layout, int rank, const TensorView& global, const TensorView& local);
void unshard(const SequenceLayout& layout, int rank, const TensorView& local, const TensorView& global);

class Plan;   // defined below by the distributed layer (issue 3)

}  // namespace burst
