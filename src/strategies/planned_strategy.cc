// The planned-strategy shell (see planned_strategy.h).
#include "strategies/planned_strategy.h"

#include "burst/error.h"
#include "plan_strategies.h"

namespace burst::strategies {

PlannedStrategy::PlannedStrategy(const Setup& setup) : comm_(setup.comm), device_(setup.device) {
  const StrategyPlan plan = strategy_plan(setup.cfg, setup.shape, setup.plan->layout(), *setup.resolved,
                                          setup.plan->ranks_per_node());
  BURST_CHECK(!plan.empty(), Internal, to_string(setup.cfg.strategy),
              ": no strategy plan for a validated configuration");
  const auto r = static_cast<std::size_t>(setup.rank);
  pairs_ = plan.visible_pairs[r];
  peak_fwd_ = plan.forward_peak[r];
  peak_bwd_ = plan.backward_peak[r];
  peak_bwd_stateless_ = plan.backward_stateless_peak.empty() ? peak_bwd_ : plan.backward_stateless_peak[r];
}

}  // namespace burst::strategies
