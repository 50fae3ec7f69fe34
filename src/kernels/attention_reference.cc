// The oracle: attention by definition. Plain loops, one materialised score row per query,
// the mask asked per element through ResolvedMask::visible, accumulation in Acc (double for the
// oracle, float for the naive-fp32 twin the tests use to size tolerances). bf16/fp16 operands
// are widened exactly on load and results rounded once on store (kernels/convert.h, portable
// table), so the oracle sees exactly the rounded inputs the tiled kernel sees. Same signatures as
// the tiled kernel (kernels.h). Parallel over independent (b, h) / (b, h_kv) only, so results
// do not depend on the thread count.
//
// Forward, per row i of head h (KV head h / (H/H_kv)):
//   s_j = τ·q_i·k_j for visible j;  m = max_j s_j;  l = Σ_j exp(s_j − m);
//   out_i = Σ_j exp(s_j − m)·v_j / l;  lse_i = m + log l;  no visible j → out_i = 0, lse_i = −inf.
// Backward (docs/algorithm.md §3), with lse and delta = rowsum(dout∘out) given:
//   P_ij = exp(s_ij − lse_i);  dV_j += P_ij·dout_i;  dP_ij = dout_i·v_j;
//   dS_ij = P_ij·(dP_ij − delta_i);  dQ_i += τ·dS_ij·k_j;  dK_j += τ·dS_ij·q_i.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/convert.h"
#include "kernels/kernels.h"

namespace burst::kernels {
namespace {

template <typename Acc>
Acc dot(const float* a, const float* b, std::int64_t D) {
  Acc s = 0;
  for (std::int64_t d = 0; d < D; ++d) s += static_cast<Acc>(a[d]) * static_cast<Acc>(b[d]);
  return s;
}

// Row (b, s, h) of x widened to fp32 into buf (resized to D); returns buf.data().
const float* row(const Operand& x, std::int64_t b, std::int64_t s, std::int64_t h, std::vector<float>& buf) {
  load_row(converters_portable(), x, b, s, h, static_cast<int>(buf.size()), buf.data());
  return buf.data();
}

// Row (b, s, h) of dst ← vals (or dst + vals when accumulate; F32 only), rounded once to dst's dtype.
template <typename Acc>
void emit(const MutOperand& dst, std::int64_t b, std::int64_t s, std::int64_t h, const Acc* vals,
          bool accumulate, std::vector<float>& buf) {
  const auto D = static_cast<std::int64_t>(buf.size());
  const float* old = static_cast<const float*>(dst.data) + element_offset(dst, b, s, h);
  for (std::int64_t d = 0; d < D; ++d)
    buf[static_cast<std::size_t>(d)] =
        accumulate ? static_cast<float>(static_cast<Acc>(old[d]) + vals[d]) : static_cast<float>(vals[d]);
  store_row(converters_portable(), dst, b, s, h, static_cast<int>(D), buf.data(), 1.0f, false, buf.data());
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
    std::vector<float> qbuf(static_cast<std::size_t>(D)), kbuf(qbuf.size()), vbuf(qbuf.size()),
        obuf(qbuf.size());
    for (std::int64_t i = 0; i < p.S_q; ++i) {
      const float* q = row(p.q, b, i, h, qbuf);
      float& lse = io.lse.data[b * io.lse.sb + h * io.lse.sh + i * io.lse.ss];
      Acc m = -kInf;
      for (std::int64_t j = 0; j < p.S_kv; ++j) {
        const auto ju = static_cast<std::size_t>(j);
        seen[ju] = p.mask->visible(p.q_pos[i], p.kv_pos[j]) ? 1 : 0;
        if (!seen[ju]) continue;
        score[ju] = scale * dot<Acc>(q, row(p.k, b, j, hk, kbuf), D);
        if (score[ju] > m) m = score[ju];
      }
      std::fill(acc.begin(), acc.end(), Acc{0});
      Acc l = 0;
      for (std::int64_t j = 0; j < p.S_kv; ++j) {
        const auto ju = static_cast<std::size_t>(j);
        if (!seen[ju]) continue;
        const Acc e = std::exp(score[ju] - m);
        l += e;
        const float* v = row(p.v, b, j, hk, vbuf);
        for (std::int64_t d = 0; d < D; ++d) acc[static_cast<std::size_t>(d)] += e * static_cast<Acc>(v[d]);
      }
      if (l == 0) {  // no visible key: the flash_attn convention, never NaN
        emit(io.out, b, i, h, acc.data(), false, obuf);  // acc is all zeros here
        lse = -std::numeric_limits<float>::infinity();
        continue;
      }
      for (auto& a : acc) a /= l;
      emit(io.out, b, i, h, acc.data(), false, obuf);
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
    std::vector<float> qbuf(Du), gbuf(Du), kbuf(Du), vbuf(Du), obuf(Du);
    for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      for (std::int64_t i = 0; i < p.S_q; ++i) {
        const float* q = row(p.q, b, i, h, qbuf);
        const float* dout = row(io.dout, b, i, h, gbuf);
        const float lse_f = io.lse.data[b * io.lse.sb + h * io.lse.sh + i * io.lse.ss];
        std::fill(dq.begin(), dq.end(), Acc{0});
        if (lse_f != -std::numeric_limits<float>::infinity()) {  // −inf rows contribute nothing
          const auto lse = static_cast<Acc>(lse_f);
          const auto delta =
              static_cast<Acc>(io.delta.data[b * io.delta.sb + h * io.delta.sh + i * io.delta.ss]);
          for (std::int64_t j = 0; j < S_kv; ++j) {
            if (!p.mask->visible(p.q_pos[i], p.kv_pos[j])) continue;
            const float* k = row(p.k, b, j, hk, kbuf);
            const float* v = row(p.v, b, j, hk, vbuf);
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
        emit(io.dq, b, i, h, dq.data(), io.accumulate, obuf);
      }
    }
    for (std::int64_t j = 0; j < S_kv; ++j) {
      emit(io.dk, b, j, hk, dk.data() + static_cast<std::size_t>(j) * Du, io.accumulate, obuf);
      emit(io.dv, b, j, hk, dv.data() + static_cast<std::size_t>(j) * Du, io.accumulate, obuf);
    }
  }
}

}  // namespace

void forward_reference(const Problem& p, const ForwardIO& io) { forward_impl<double>(p, io); }
void backward_reference(const Problem& p, const BackwardIO& io) { backward_impl<double>(p, io); }
void forward_reference_fp32(const Problem& p, const ForwardIO& io) { forward_impl<float>(p, io); }
void backward_reference_fp32(const Problem& p, const BackwardIO& io) { backward_impl<float>(p, io); }

}  // namespace burst::kernels
