// The oracle: attention by definition. Plain loops, one materialised score row per query,
// the mask asked per element through ResolvedMask::visible, accumulation in Acc (double for the
// oracle, float for the naive-fp32 twin the tests use to size tolerances). Same signatures as
// the tiled kernel (kernels.h). Parallel over independent (b, h) / (b, h_kv) only, so results
// do not depend on the thread count.
//
// Forward, per row i of head h (KV head h / (H/H_kv)):
//   s_j = τ·q_i·k_j for visible j;  m = max_j s_j;  l = Σ_j exp(s_j − m);
//   out_i = Σ_j exp(s_j − m)·v_j / l;  lse_i = m + log l;  no visible j → out_i = 0, lse_i = −inf.
// Backward (algorithm.md §3), with lse and delta = rowsum(dout∘out) given:
//   P_ij = exp(s_ij − lse_i);  dV_j += P_ij·dout_i;  dP_ij = dout_i·v_j;
//   dS_ij = P_ij·(dP_ij − delta_i);  dQ_i += τ·dS_ij·k_j;  dK_j += τ·dS_ij·q_i.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernels.h"

namespace burst::kernels {
namespace {

template <typename Acc>
Acc dot(const float* a, const float* b, std::int64_t D) {
  Acc s = 0;
  for (std::int64_t d = 0; d < D; ++d) s += static_cast<Acc>(a[d]) * static_cast<Acc>(b[d]);
  return s;
}

template <typename Acc>
void forward_impl(const Problem& p, const ForwardIO& io) {
  constexpr Acc kInf = std::numeric_limits<Acc>::infinity();
  const std::int64_t group = p.H / p.H_kv, D = p.D;
  const auto scale = static_cast<Acc>(p.scale);
#pragma omp parallel for num_threads(p.num_threads) schedule(static)
  for (std::int64_t bh = 0; bh < p.B * p.H; ++bh) {
    const std::int64_t b = bh / p.H, h = bh % p.H, hk = h / group;
    std::vector<Acc> score(static_cast<std::size_t>(p.S_kv));
    std::vector<char> seen(static_cast<std::size_t>(p.S_kv));
    std::vector<Acc> acc(static_cast<std::size_t>(D));
    for (std::int64_t i = 0; i < p.S_q; ++i) {
      const float* q = p.q.data + b * p.q.sb + i * p.q.ss + h * p.q.sh;
      float* out = io.out.data + b * io.out.sb + i * io.out.ss + h * io.out.sh;
      float& lse = io.lse.data[b * io.lse.sb + h * io.lse.sh + i * io.lse.ss];
      Acc m = -kInf;
      for (std::int64_t j = 0; j < p.S_kv; ++j) {
        const auto ju = static_cast<std::size_t>(j);
        seen[ju] = p.mask->visible(p.q_pos[i], p.kv_pos[j]) ? 1 : 0;
        if (!seen[ju]) continue;
        score[ju] = scale * dot<Acc>(q, p.k.data + b * p.k.sb + j * p.k.ss + hk * p.k.sh, D);
        if (score[ju] > m) m = score[ju];
      }
      std::fill(acc.begin(), acc.end(), Acc{0});
      Acc l = 0;
      for (std::int64_t j = 0; j < p.S_kv; ++j) {
        const auto ju = static_cast<std::size_t>(j);
        if (!seen[ju]) continue;
        const Acc e = std::exp(score[ju] - m);
        l += e;
        const float* v = p.v.data + b * p.v.sb + j * p.v.ss + hk * p.v.sh;
        for (std::int64_t d = 0; d < D; ++d) acc[static_cast<std::size_t>(d)] += e * static_cast<Acc>(v[d]);
      }
      if (l == 0) {  // no visible key: the flash_attn convention, never NaN
        for (std::int64_t d = 0; d < D; ++d) out[d] = 0.0f;
        lse = -std::numeric_limits<float>::infinity();
        continue;
      }
      for (std::int64_t d = 0; d < D; ++d) out[d] = static_cast<float>(acc[static_cast<std::size_t>(d)] / l);
      lse = static_cast<float>(m + std::log(l));
    }
  }
}

template <typename Acc>
void backward_impl(const Problem& p, const BackwardIO& io) {
  const std::int64_t group = p.H / p.H_kv, D = p.D, S_kv = p.S_kv;
  const auto scale = static_cast<Acc>(p.scale);
  const auto Du = static_cast<std::size_t>(D);
  // One task per (b, h_kv): it owns dK, dV of that KV head and dQ of its `group` query heads,
  // so no two tasks write the same element.
#pragma omp parallel for num_threads(p.num_threads) schedule(static)
  for (std::int64_t bg = 0; bg < p.B * p.H_kv; ++bg) {
    const std::int64_t b = bg / p.H_kv, hk = bg % p.H_kv;
    std::vector<Acc> dk(static_cast<std::size_t>(S_kv) * Du, Acc{0}), dv(dk.size(), Acc{0}), dq(Du);
    for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      for (std::int64_t i = 0; i < p.S_q; ++i) {
        const float* q = p.q.data + b * p.q.sb + i * p.q.ss + h * p.q.sh;
        const float* dout = io.dout.data + b * io.dout.sb + i * io.dout.ss + h * io.dout.sh;
        float* dq_out = io.dq.data + b * io.dq.sb + i * io.dq.ss + h * io.dq.sh;
        const float lse_f = io.lse.data[b * io.lse.sb + h * io.lse.sh + i * io.lse.ss];
        std::fill(dq.begin(), dq.end(), Acc{0});
        if (lse_f != -std::numeric_limits<float>::infinity()) {  // −inf rows contribute nothing
          const auto lse = static_cast<Acc>(lse_f);
          const auto delta = static_cast<Acc>(io.delta.data[b * io.delta.sb + h * io.delta.sh + i * io.delta.ss]);
          for (std::int64_t j = 0; j < S_kv; ++j) {
            if (!p.mask->visible(p.q_pos[i], p.kv_pos[j])) continue;
            const float* k = p.k.data + b * p.k.sb + j * p.k.ss + hk * p.k.sh;
            const float* v = p.v.data + b * p.v.sb + j * p.v.ss + hk * p.v.sh;
            const Acc P = std::exp(scale * dot<Acc>(q, k, D) - lse);
            const Acc dS = P * (dot<Acc>(dout, v, D) - delta);
            Acc* dk_j = dk.data() + static_cast<std::size_t>(j) * Du;
            Acc* dv_j = dv.data() + static_cast<std::size_t>(j) * Du;
            for (std::size_t d = 0; d < Du; ++d) {
              dq[d] += scale * dS * static_cast<Acc>(k[d]);
              dk_j[d] += scale * dS * static_cast<Acc>(q[d]);
              dv_j[d] += P * static_cast<Acc>(dout[d]);
            }
          }
        }
        for (std::size_t d = 0; d < Du; ++d)
          dq_out[d] = io.accumulate ? static_cast<float>(static_cast<Acc>(dq_out[d]) + dq[d]) : static_cast<float>(dq[d]);
      }
    }
    for (std::int64_t j = 0; j < S_kv; ++j) {
      float* dk_out = io.dk.data + b * io.dk.sb + j * io.dk.ss + hk * io.dk.sh;
      float* dv_out = io.dv.data + b * io.dv.sb + j * io.dv.ss + hk * io.dv.sh;
      const Acc* dk_j = dk.data() + static_cast<std::size_t>(j) * Du;
      const Acc* dv_j = dv.data() + static_cast<std::size_t>(j) * Du;
      for (std::size_t d = 0; d < Du; ++d) {
        dk_out[d] = io.accumulate ? static_cast<float>(static_cast<Acc>(dk_out[d]) + dk_j[d]) : static_cast<float>(dk_j[d]);
        dv_out[d] = io.accumulate ? static_cast<float>(static_cast<Acc>(dv_out[d]) + dv_j[d]) : static_cast<float>(dv_j[d]);
      }
    }
  }
}

}  // namespace

void forward_reference(const Problem& p, const ForwardIO& io) { forward_impl<double>(p, io); }
void backward_reference(const Problem& p, const BackwardIO& io) { backward_impl<double>(p, io); }
void forward_reference_fp32(const Problem& p, const ForwardIO& io) { forward_impl<float>(p, io); }
void backward_reference_fp32(const Problem& p, const BackwardIO& io) { backward_impl<float>(p, io); }

}  // namespace burst::kernels
