// src/strategies/planned_strategy.h — the pass shell of the peer strategies (internal): the
// numbers they report come from their pure plan, a pass's times are measured here.
#pragma once

#include <cstdint>
#include <memory>

#include "burst/comm.h"
#include "device/device.h"
#include "strategies/step_log.h"
#include "strategies/strategy_impl.h"

namespace burst::strategies {

/// The shell the peer strategies share: the numbers they report come from their pure plan
/// (plan_strategies.h); a pass's times are measured here (the façade aborts on failure).
class PlannedStrategy : public Strategy {
 protected:
  /// Not collective. Throws Error(Internal) if the configuration has no strategy plan (it passed
  /// validation, so it must have one).
  explicit PlannedStrategy(const Setup& setup);
  /// Runs pass(PassTimes&) and fills the DistStats fields the strategy owns (peak: the plan's
  /// bound on the pass's buffers, peak_fwd_, peak_bwd_ or peak_bwd_stateless_).
  template <typename F>
  void run(std::int64_t peak, DistStats& stats, F&& pass) const {
    PassTimes t;
    pass(t);
    fill_stats(stats, t, pairs_, peak);
  }

  /// The device of every tensor of a pass (Setup::device).
  const device::Device& dev() const { return *device_; }

  Communicator comm_;
  std::shared_ptr<const device::Device> device_;  ///< Setup::device: every memory operation's
  std::int64_t pairs_ = 0, peak_fwd_ = 0, peak_bwd_ = 0, peak_bwd_stateless_ = 0;
};

}  // namespace burst::strategies
