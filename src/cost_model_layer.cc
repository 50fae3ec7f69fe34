// Cost model, whole-layer mode: the linear layers around one attention call and the
// communication they cause (Megatron SP for headpar with a model width, the weight-gradient all-reduce for
// the sequence- and context-parallel strategies). Formulas and sources: docs/cost_model.md § Whole layer.
#include <algorithm>

#include "burst/cost_model.h"
#include "cost_model_internal.h"

namespace burst {

std::int64_t default_ffn_width(std::int64_t h) {
  const std::int64_t raw = (8 * h + 2) / 3;  // ⌈8h/3⌉
  return (raw + 255) / 256 * 256;
}

double linear_flops(double tokens, std::int64_t h, std::int64_t H, std::int64_t H_kv, std::int64_t D,
                    std::int64_t f, bool backward) {
  const double forward = 2.0 * tokens * layer_weight_count(h, H, H_kv, D, f);
  return backward ? 2.0 * forward : forward;
}

double layer_weight_count(std::int64_t h, std::int64_t H, std::int64_t H_kv, std::int64_t D, std::int64_t f) {
  const double hd = static_cast<double>(h);
  return hd * static_cast<double>((H + 2 * H_kv) * D) + static_cast<double>(H * D) * hd +
         3.0 * hd * static_cast<double>(f);
}

double all_reduce_seconds(const ClusterSpec& c, int P, double bytes, bool inter_node) {
  if (P <= 1 || bytes <= 0) return 0;
  return reduce_scatter_seconds(c, P, bytes / P, inter_node) +
         all_gather_seconds(c, P, bytes / P, inter_node);
}

namespace cost {

void add_layer_terms(const ClusterSpec& c, const Workload& w, Estimate& e) {
  const int P = c.devices();
  const bool inter = P > c.devices_per_node;
  const bool want_fwd = w.pass != PassKind::Backward;
  const bool want_bwd = w.pass != PassKind::Forward;
  const bool tp = e.candidate.strategy == StrategyKind::HeadParallel;
  const std::int64_t f = w.resolved_ffn_width();
  const double beta = w.bytes_per_element;
  const double tokens = static_cast<double>(w.B) * static_cast<double>(w.S_global) / P;
  const double weights = layer_weight_count(w.model_width, w.H, w.H_kv, w.D, f);
  LayerEstimate& l = e.layer;
  // Both families do 1/P of the layer's linear work: sequence parallel on S/P tokens with whole
  // weights, tp on all S tokens with 1/P of every weight matrix.
  const double rate = c.matmul_flops * c.linear_efficiency;
  const double bwd_flops = want_bwd ? linear_flops(tokens, w.model_width, w.H, w.H_kv, w.D, f, true) : 0.0;
  l.linear_flops =
      bwd_flops + (want_fwd ? linear_flops(tokens, w.model_width, w.H, w.H_kv, w.D, f, false) : 0.0);
  l.linear_seconds = l.linear_flops / rate;
  double comm_bytes = 0;
  if (tp) {
    // Megatron SP around the MLP, per pass: all-gather X [B·S/P, h] before the first MLP matmul,
    // reduce-scatter after the last (the attention half is in the attention estimate already).
    const double block = tokens * static_cast<double>(w.model_width) * beta;
    const int passes = (want_fwd ? 1 : 0) + (want_bwd ? 1 : 0);
    l.comm_seconds =
        passes * (all_gather_seconds(c, P, block, inter) + reduce_scatter_seconds(c, P, block, inter));
    comm_bytes = passes * 2.0 * (P - 1) * block;
    l.weight_bytes = static_cast<std::int64_t>(weights / P * beta * (want_bwd ? 2 : 1));
  } else {
    // Weights replicated on every rank: their gradients are all-reduced once per backward,
    // overlapped with the layer's backward compute (only the excess is exposed).
    if (want_bwd && P > 1) {
      const double grad_bytes = weights * beta;
      const double overlap = e.backward.compute_seconds + bwd_flops / rate;
      l.comm_seconds = std::max(0.0, all_reduce_seconds(c, P, grad_bytes, inter) - overlap);
      comm_bytes = 2.0 * (P - 1) / P * grad_bytes;
    }
    l.weight_bytes = static_cast<std::int64_t>(weights * beta * (want_bwd ? 2 : 1));
  }
  l.comm_bytes = static_cast<std::int64_t>(comm_bytes);
  l.seconds = e.seconds + l.linear_seconds + l.comm_seconds;
  l.bytes_per_device = e.bytes_per_device + l.comm_bytes;
  e.memory_bytes += static_cast<std::int64_t>(w.layers) * l.weight_bytes;
}

}  // namespace cost
}  // namespace burst
