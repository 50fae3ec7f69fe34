// RingAttention (Liu et al., arXiv 2310.01889; docs/strategies.md): K,V ring forward with the online-
// softmax merge; backward K,V ring with the dK,dV accumulators following one step behind on a
// second ring; Q, dO, lse, dQ stay. Striped Attention and zigzag ring = this strategy on the
// striped / zigzag layout. With more than one node and DistConfig::double_ring (the default),
// K,V and the dK,dV partials run on the topology-aware double ring of burst's executor (an
// intra-node ring inside inter-node rounds): LoongTrain's double-ring attention (Gu et al.,
// arXiv 2406.18485 §4), the baseline BurstEngine compares against; double_ring = false keeps
// the flat ring.
#include "burst/error.h"
#include "strategies/ring_family.h"
#include "strategies/strategy_impl.h"

namespace burst::strategies {

void validate_ring(const DistConfig& cfg, const ProblemShape&, const ResolvedMask&, int) {
  BURST_CHECK(cfg.backward_side != BackwardSide::QuerySide, Unsupported,
              "strategy 'ring' circulates K,V in the backward (KvSide); the query-side backward "
              "is strategy 'burst'");
}

std::unique_ptr<Strategy> make_ring(const Setup& setup) {
  return make_ring_family(setup, /*kv_side_backward=*/true);
}

}  // namespace burst::strategies
