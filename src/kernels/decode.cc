// Partial decode attention over one KV-cache chunk: the Tiled twin (microkernel GEMMs, base-2
// softmax as in attention_tiled.cc) and the fp64 Reference twin. See decode.h for the layout.
#include "kernels/decode.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "burst/softmax_merge.h"
#include "kernels/convert.h"
#include "kernels/microkernels.h"
#include "kernels/tiled_common.h"

namespace burst::kernels {
namespace {

std::int64_t kt_index(std::int64_t t, std::int64_t d, std::int64_t D) {
  return (t / kDecodePanel) * D * kDecodePanel + d * kDecodePanel + t % kDecodePanel;
}

// First column of the chunk a query at position qp must not see (positions increase).
std::int64_t visible_count(const DecodeChunk& c, const std::int64_t* q_pos, std::int64_t i) {
  if (q_pos == nullptr) return c.count;
  return std::upper_bound(c.pos, c.pos + c.count, q_pos[i]) - c.pos;
}

// Element i of a chunk, widened to fp32 (exact).
float element(const void* data, DType dtype, std::int64_t i) {
  return dtype == DType::BF16 ? bf16_to_float(static_cast<const std::uint16_t*>(data)[i])
                              : static_cast<const float*>(data)[i];
}

}  // namespace

void decode_chunk_store(void* chunk_data, DType dtype, std::int64_t C, std::int64_t H_kv, std::int64_t D,
                        std::int64_t Dp, std::int64_t t, const float* k, const float* v, std::int64_t k_hs,
                        std::int64_t v_hs) {
  for (std::int64_t g = 0; g < H_kv; ++g) {
    const std::int64_t head = g * decode_chunk_head_floats(C, D, Dp);
    const float* kr = k + g * k_hs;
    const float* vr = v + g * v_hs;
    if (dtype == DType::BF16) {
      auto* h = static_cast<std::uint16_t*>(chunk_data) + head;
      for (std::int64_t d = 0; d < D; ++d) h[kt_index(t, d, D)] = bf16_from_float(kr[d]);
      for (std::int64_t d = 0; d < D; ++d) h[C * D + t * Dp + d] = bf16_from_float(vr[d]);
    } else {
      float* h = static_cast<float*>(chunk_data) + head;
      for (std::int64_t d = 0; d < D; ++d) h[kt_index(t, d, D)] = kr[d];
      std::copy(vr, vr + D, h + C * D + t * Dp);
    }
  }
}

void decode_chunk_load(const void* chunk_data, DType dtype, std::int64_t C, std::int64_t H_kv, std::int64_t D,
                       std::int64_t Dp, std::int64_t t, float* k, float* v) {
  for (std::int64_t g = 0; g < H_kv; ++g) {
    const std::int64_t head = g * decode_chunk_head_floats(C, D, Dp);
    for (std::int64_t d = 0; d < D; ++d) {
      k[g * D + d] = element(chunk_data, dtype, head + kt_index(t, d, D));
      v[g * D + d] = element(chunk_data, dtype, head + C * D + t * Dp + d);
    }
  }
}

void decode_chunk_tiled(const DecodeQuery& dq, const DecodeChunk& chunk, float* out, float* lse,
                        DecodeScratch& w) {
  const Microkernels& mk = microkernels(dq.isa);
  const std::int64_t G = dq.H / dq.H_kv, D = dq.D, Dp = dq.Dp, C = chunk.capacity;
  const int m = static_cast<int>(G * dq.S_q);  // rows of one KV head: r = i·G + j
  const std::int64_t panels = (chunk.count + kDecodePanel - 1) / kDecodePanel;
  const std::int64_t Cp = panels * kDecodePanel;
  w.q.resize(static_cast<std::size_t>(m * D));
  w.s.resize(static_cast<std::size_t>(m * Cp));
  w.o.resize(static_cast<std::size_t>(m * Dp));
  w.inv.resize(static_cast<std::size_t>(m));
  std::vector<float>& inv = w.inv;
  const float c2 = dq.scale * tiled::kLog2e;  // scores in base 2: exp2 is the only transcendental
  const bool bf16 = chunk.dtype == DType::BF16;
  const Converters& cv = converters(dq.isa);
  if (bf16) w.wide.resize(static_cast<std::size_t>(kDecodePanel * std::max(D, Dp)));
  for (std::int64_t g = 0; g < dq.H_kv; ++g) {
    const std::int64_t head_off = g * decode_chunk_head_floats(C, D, Dp);
    const float* head = bf16 ? nullptr : static_cast<const float*>(chunk.data) + head_off;
    const std::uint16_t* head16 = bf16 ? static_cast<const std::uint16_t*>(chunk.data) + head_off : nullptr;
    for (std::int64_t i = 0; i < dq.S_q; ++i)
      for (std::int64_t j = 0; j < G; ++j) {
        const float* src = dq.q + (i * dq.H + g * G + j) * D;
        float* dst = w.q.data() + (i * G + j) * D;
        for (std::int64_t d = 0; d < D; ++d) dst[d] = src[d] * c2;
      }
    for (std::int64_t p = 0; p < panels; ++p) {
      const float* panel = bf16 ? w.wide.data() : head + p * D * kDecodePanel;
      if (bf16) cv.widen_bf16(head16 + p * D * kDecodePanel, w.wide.data(), D * kDecodePanel);  // into L1
      mk.gemm(w.q.data(), D, panel, kDecodePanel, w.s.data() + p * kDecodePanel, Cp, m, kDecodePanel,
              static_cast<int>(D), false);
    }
    for (int r = 0; r < m; ++r) {
      const std::int64_t i = r / G, h = g * G + r % G;
      float* srow = w.s.data() + r * Cp;
      std::fill(srow + visible_count(chunk, dq.q_pos, i), srow + Cp, kNegInf);
      const float mx = mk.row_max(srow, static_cast<int>(Cp));
      float& row_lse = lse[h * dq.S_q + i];
      if (mx == kNegInf) {  // nothing visible in this chunk: P = 0 so the P·V GEMM adds nothing
        std::fill(srow, srow + Cp, 0.0f);
        row_lse = kNegInf;
        inv[static_cast<std::size_t>(r)] = 0.0f;
        continue;
      }
      const float sum = mk.exp2_shift_sum(srow, static_cast<int>(Cp), mx);
      row_lse = online_softmax_lse(mx * tiled::kLn2, sum);
      inv[static_cast<std::size_t>(r)] = online_softmax_inv_sum(sum);
    }
    if (!bf16) {
      mk.gemm(w.s.data(), Cp, head + C * D, Dp, w.o.data(), Dp, m, static_cast<int>(Dp),
              static_cast<int>(chunk.count), false);
    } else {  // V in blocks of 64 rows [64][Dp], widened into L1, accumulated
      for (std::int64_t t0 = 0; t0 < chunk.count; t0 += kDecodePanel) {
        const std::int64_t n = std::min<std::int64_t>(kDecodePanel, chunk.count - t0);
        cv.widen_bf16(head16 + C * D + t0 * Dp, w.wide.data(), n * Dp);
        mk.gemm(w.s.data() + t0, Cp, w.wide.data(), Dp, w.o.data(), Dp, m, static_cast<int>(Dp),
                static_cast<int>(n), t0 > 0);
      }
    }
    for (int r = 0; r < m; ++r) {
      const std::int64_t i = r / G, h = g * G + r % G;
      const float* o = w.o.data() + r * Dp;
      float* dst = out + (i * dq.H + h) * D;
      for (std::int64_t d = 0; d < D; ++d) dst[d] = o[d] * inv[static_cast<std::size_t>(r)];
    }
  }
}

void decode_chunk_reference(const DecodeQuery& dq, const DecodeChunk& chunk, float* out, float* lse) {
  const std::int64_t G = dq.H / dq.H_kv, D = dq.D, Dp = dq.Dp, C = chunk.capacity;
  std::vector<double> s(static_cast<std::size_t>(chunk.count)), o(static_cast<std::size_t>(D));
  for (std::int64_t i = 0; i < dq.S_q; ++i) {
    const std::int64_t n = visible_count(chunk, dq.q_pos, i);
    for (std::int64_t h = 0; h < dq.H; ++h) {
      const std::int64_t head = (h / G) * decode_chunk_head_floats(C, D, Dp);
      const auto at = [&](std::int64_t e) { return double{element(chunk.data, chunk.dtype, head + e)}; };
      const float* qr = dq.q + (i * dq.H + h) * D;
      double mx = -std::numeric_limits<double>::infinity();
      for (std::int64_t t = 0; t < n; ++t) {
        double acc = 0;
        for (std::int64_t d = 0; d < D; ++d) acc += double{qr[d]} * at(kt_index(t, d, D));
        s[static_cast<std::size_t>(t)] = double{dq.scale} * acc;
        mx = std::max(mx, s[static_cast<std::size_t>(t)]);
      }
      std::fill(o.begin(), o.end(), 0.0);
      double sum = 0;
      for (std::int64_t t = 0; t < n; ++t) {
        const double p = std::exp(s[static_cast<std::size_t>(t)] - mx);
        sum += p;
        for (std::int64_t d = 0; d < D; ++d) o[static_cast<std::size_t>(d)] += p * at(C * D + t * Dp + d);
      }
      float* dst = out + (i * dq.H + h) * D;
      for (std::int64_t d = 0; d < D; ++d)
        dst[d] = n > 0 ? static_cast<float>(o[static_cast<std::size_t>(d)] / sum) : 0.0f;
      lse[h * dq.S_q + i] = n > 0 ? static_cast<float>(mx + std::log(sum)) : kNegInf;
    }
  }
}

}  // namespace burst::kernels
