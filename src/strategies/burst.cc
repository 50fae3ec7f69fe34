// BurstAttention (arXiv 2403.09347; docs/algorithm.md §2–§7): K,V ring forward with the online-
// softmax merge; backward circulates Q, dO, delta = rowsum(dO∘O) and lse with the partial dQ
// on a second ring lagging one step (plus the final hop), while K, V, dK, dV stay. With more
// than one node the topology-aware double ring (intra-node ring inside inter-node rounds).
// Beyond the paper: under GQA the query-side payload (H heads) outgrows the K/V side (H_kv
// heads); BackwardSide::Auto picks the circulation with fewer bytes from the plan's formulas
// (docs/algorithm.md §4.4) and the stats / plan report which one ran.
#include "burst/error.h"
#include "strategies/ring_family.h"
#include "strategies/strategy_impl.h"

namespace burst::strategies {

void validate_burst(const DistConfig&, const ProblemShape&, const ResolvedMask&, int) {
  // Every mask is expressed through explicit global positions; every layout and side is
  // supported. Shape and layout divisibility are checked by the façade and the plan.
}

std::unique_ptr<Strategy> make_burst(const Setup& setup) {
  return make_ring_family(setup, /*kv_side_backward=*/false);
}

}  // namespace burst::strategies
