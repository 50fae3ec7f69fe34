// src/strategies/strategy_impl.h — the internal interface between the DistAttention façade
// (src/strategy.cc) and one file per strategy (src/strategies/*.cc).
//
// A strategy provides two functions, registered in strategy.cc's table by StrategyKind:
//   validate_<name>(cfg, shape, mask, P): pure, local, no MPI. Throws Error(Unsupported) for a
//     combination the strategy cannot express (e.g. ulysses with H % P ≠ 0) and
//     Error(InvalidArgument) for invalid values. The façade runs it on every rank inside
//     Communicator::agree_on, so every rank throws the same Error before any payload moves.
//   make_<name>(setup): builds the executor. Collective (it may create channels with
//     setup.comm.channel()); called on every rank after validation succeeded everywhere.
// Executors receive local tensors whose shapes the façade has already checked and agreed on;
// they fill the DistStats fields they own (compute_seconds, exposed_comm_seconds,
// visible_pairs, peak_buffer_bytes, backward_side); the façade sets seconds, bytes_sent and
// messages_sent from the communicator counters, and runs every pass under run_pass: an
// exception once payload may be in flight aborts the communicator (no peer left waiting).
// A new strategy adds its own file with one validate_* / make_* pair below.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "burst/comm.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "burst/strategy.h"
#include "device/device.h"

namespace burst::strategies {

class StepTables;

/// Seconds of steady_clock since t0 (the strategies' and DistAttention's per-pass timings).
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Everything fixed at construction. Identical on every rank except `rank` and `topology`.
struct Setup {
  Communicator comm;  ///< DistAttention's private dup; counters are the pass's
  DistConfig cfg;
  ProblemShape shape;
  /// The mask against (S_global, S_global), resolved once per DistAttention (which keeps it alive)
  /// and the only form of the mask a strategy gets: the plan, the strategy plan and every kernel
  /// step (step_params, kernels/step.h) use this one object.
  std::shared_ptr<const ResolvedMask> resolved;
  std::shared_ptr<const Plan> plan;  ///< the pure plan (layout, steps, predicted bytes)
  int rank = 0, P = 1;
  NodeTopology topology;       ///< nodes × ranks_per_node (burst double ring)
  float softmax_scale = 1.0f;  ///< resolved τ
  /// The device every tensor of a pass lives on and every memory operation of the strategy
  /// goes through (src/device/device.h; the CPU device today).
  std::shared_ptr<const device::Device> device;
  /// The mask's slice table and the plan's positions in the device's memory, uploaded once
  /// (step_tables.h; step_params reads them). Null: the host tables (the CPU, and tests that
  /// run executors alone; a GPU's step kernels then upload them per step).
  std::shared_ptr<const StepTables> tables = nullptr;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  /// Shapes as DistAttention::forward (already validated and agreed over ranks). Collective.
  virtual void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse, DistStats& stats) = 0;
  /// Collective, before a backward whose caller passed an empty lse: true when this backward
  /// runs without lse on every rank (ulysses, usp: a saved context matches q, k, v, out on
  /// every rank). Same value on every rank. Default: false (lse is required).
  virtual bool backward_without_lse(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& out) {
    (void)q, (void)k, (void)v, (void)out;
    return false;
  }
  /// Shapes as DistAttention::backward; lse empty only after backward_without_lse said true.
  /// Collective.
  virtual void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& lse, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv, DistStats& stats) = 0;
};

/// Runs one pass of a strategy. Once payload may be in flight an exception on one rank would
/// leave its peers waiting in a collective, so it aborts the communicator with a rank-tagged
/// message instead (docs/style.md rule 5). Inputs were validated and agreed before, so this is for
/// internal failures only (allocation, MPI errors).
/// `what` ("burst forward") is also the activity the communication watchdog names.
template <typename F>
void run_pass(const Communicator& comm, const std::string& what, F&& pass) {
  comm.set_activity("strategy " + what);
  try {
    pass();
  } catch (const std::exception& e) { comm.abort(what + ": " + e.what()); }
}

using ValidateFn = void (*)(const DistConfig&, const ProblemShape&, const ResolvedMask&, int P);
using MakeFn = std::unique_ptr<Strategy> (*)(const Setup&);

// One pair per strategy (definitions: burst.cc, ring.cc, allgather.cc, ulysses.cc, usp.cc,
// distflash.cc, headpar.cc).
void validate_burst(const DistConfig&, const ProblemShape&, const ResolvedMask&, int P);
std::unique_ptr<Strategy> make_burst(const Setup&);
void validate_ring(const DistConfig&, const ProblemShape&, const ResolvedMask&, int P);
std::unique_ptr<Strategy> make_ring(const Setup&);
void validate_allgather(const DistConfig&, const ProblemShape&, const ResolvedMask&, int P);
std::unique_ptr<Strategy> make_allgather(const Setup&);
void validate_ulysses(const DistConfig&, const ProblemShape&, const ResolvedMask&, int P);
std::unique_ptr<Strategy> make_ulysses(const Setup&);
void validate_usp(const DistConfig&, const ProblemShape&, const ResolvedMask&, int P);
std::unique_ptr<Strategy> make_usp(const Setup&);
void validate_distflash(const DistConfig&, const ProblemShape&, const ResolvedMask&, int P);
std::unique_ptr<Strategy> make_distflash(const Setup&);
void validate_headpar(const DistConfig&, const ProblemShape&, const ResolvedMask&, int P);
std::unique_ptr<Strategy> make_headpar(const Setup&);

}  // namespace burst::strategies
