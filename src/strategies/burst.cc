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

namespace {

class BurstStrategy final : public Strategy {
 public:
  explicit BurstStrategy(const Setup& setup)
      : setup_(setup),
        exec_(setup.comm, setup.plan->nodes(), setup.plan->ranks_per_node(), setup.cfg.overlap) {}

  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, DistStats& stats) override {
    ring_forward(setup_, exec_, q, k, v, out, lse, stats);
  }

  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv, DistStats& stats) override {
    ring_backward(setup_, exec_, setup_.plan->backward_side(), dout, q, k, v, out, lse, dq, dk, dv, stats);
  }

 private:
  Setup setup_;
  RingExecutor exec_;
};

}  // namespace

void validate_burst(const DistConfig&, const ProblemShape&, const Mask&, int) {
  // Every mask is expressed through explicit global positions; every layout and side is
  // supported. Shape and layout divisibility are checked by the façade and the plan.
}

std::unique_ptr<Strategy> make_burst(const Setup& setup) { return std::make_unique<BurstStrategy>(setup); }

}  // namespace burst::strategies
