// One attention step's kernel calls as the device prefers them (see shaped_steps.h).
#include "strategies/shaped_steps.h"

#include "burst/softmax_merge.h"
#include "strategies/views.h"

namespace burst::strategies {

void fill_unseen(const device::Device& dev, const TensorView& out, const TensorView& lse, std::int64_t a,
                 std::int64_t b) {
  if (a >= b) return;
  dev.fill(narrow(out, 1, a, b), 0.0f);
  dev.fill(narrow(lse, 2, a, b), kNegInf);
}

void shaped_forward(const device::Device& dev, const ResolvedMask& mask, bool shaped,
                    const std::int64_t* q_pos, const std::int64_t* kv_pos, const TensorView& q,
                    const TensorView& k, const TensorView& v, const TensorView& out, const TensorView& lse,
                    const SpanParams& params) {
  if (!shaped) {
    dev.step_forward(q, k, v, out, lse, params(0, 0));
    return;
  }
  const std::int64_t n_q = q.size(1), n_kv = k.size(1);
  std::int64_t done = 0;
  for (const KernelSpan& sp :
       shaped_spans(mask, q_pos, kv_pos, forward_spans(mask, q_pos, n_q, kv_pos, n_kv))) {
    fill_unseen(dev, out, lse, done, sp.q0);
    dev.step_forward(narrow(q, 1, sp.q0, sp.q1), narrow(k, 1, sp.k0, sp.k1), narrow(v, 1, sp.k0, sp.k1),
                     narrow(out, 1, sp.q0, sp.q1), narrow(lse, 2, sp.q0, sp.q1), params(sp.q0, sp.k0));
    done = sp.q1;
  }
  fill_unseen(dev, out, lse, done, n_q);
}

std::vector<KernelSpan> backward_calls(const ResolvedMask& mask, bool split, bool shaped,
                                       const std::int64_t* q_pos, std::int64_t n_q,
                                       const std::int64_t* kv_pos, std::int64_t n_kv) {
  std::vector<KernelSpan> cut =
      split ? backward_spans(mask, q_pos, n_q, kv_pos, n_kv) : std::vector<KernelSpan>{{0, n_q, 0, n_kv}};
  return shaped ? shaped_spans(mask, q_pos, kv_pos, cut) : cut;
}

}  // namespace burst::strategies
