// apps/lm/dist_engine.cc — DistEngine: burst's DistAttention behind the engine interface.
#include <algorithm>

#include "attention_fn.h"
#include "runtime.h"

namespace burst::lm {
DistEngine::DistEngine(const Communicator& comm, const DistConfig& cfg, const ProblemShape& shape,
                       const Mask& mask)
    : attn_(comm, cfg, shape, mask), H_(shape.H), D_(shape.D) {
  dtype_ = shape.dtype;  // F32 or BF16 (the LM's --dtype); DistAttention checks the views against it
}

void DistEngine::forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                         const TensorView& lse) {
  const Stopwatch sw;
  attn_.forward(q, k, v, out, lse);
  totals_.forward_seconds += sw.seconds();
  totals_.bytes_sent += attn_.last_stats().bytes_sent;
  totals_.forward_pairs += attn_.last_stats().visible_pairs;
  count_pass(q.dtype);
}

void DistEngine::backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                          const TensorView& v, const TensorView& out, const TensorView& lse,
                          const TensorView& dq, const TensorView& dk, const TensorView& dv) {
  const Stopwatch sw;
  attn_.backward(dout, q, k, v, out, lse, dq, dk, dv);
  totals_.backward_seconds += sw.seconds();
  totals_.bytes_sent += attn_.last_stats().bytes_sent;
  totals_.backward_pairs += attn_.last_stats().visible_pairs;
  totals_.backward_side = attn_.last_stats().backward_side;
  count_pass(q.dtype);
}

std::int64_t DistEngine::planned_forward_pairs() const {
  const auto& pairs = attn_.plan().forward().visible_pairs;
  return pairs.empty() ? 0 : *std::max_element(pairs.begin(), pairs.end());
}

std::string DistEngine::planned_backward_side() const {
  return attn_.plan().backward_side() == BackwardSide::QuerySide ? "query" : "kv";
}

}  // namespace burst::lm
