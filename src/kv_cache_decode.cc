// DistKVCache's distributed decode (Infinite-LLM's DistAttention): local split-KV partials on the
// rank's threads, one all-gather, the lse merge in rank order. The validation order is
// kv_cache.cc's: local checks and the fingerprint agreed in one control exchange, then the decode.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <vector>

#include "burst/kv_cache.h"
#include "burst/softmax_merge.h"
#include "device/cpu/cpu_device.h"
#include "kernels/decode.h"
#include "kv_cache_internal.h"
#include "strategies/views.h"

namespace burst {

namespace {

using kernels::DecodeChunk;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

// Partial (out [B,S_q,H,D], lse [B,H,S_q]) of this rank's shard into part (out block then lse
// block): one normalised partial per chunk on the rank's threads, merged per sequence in chunk order
// (deterministic for any thread count).
void DistKVCache::Impl::decode_local(const std::vector<std::int64_t>& ids, const std::vector<float>& q,
                                     std::int64_t S_q, bool causal, float* part) {
  const std::int64_t B = static_cast<std::int64_t>(ids.size()), H = cfg.H, D = cfg.D;
  const std::int64_t out_n = S_q * H * D, lse_n = H * S_q;
  struct Item {
    std::int64_t b;
    const Chunk* chunk;
  };
  std::vector<Item> items;
  std::vector<std::vector<std::int64_t>> q_pos(static_cast<std::size_t>(B));
  std::vector<std::size_t> first(static_cast<std::size_t>(B + 1), 0);
  for (std::int64_t b = 0; b < B; ++b) {
    const Sequence& s = seqs.at(ids[static_cast<std::size_t>(b)]);
    for (std::int64_t i = 0; i < S_q; ++i) q_pos[static_cast<std::size_t>(b)].push_back(s.length - S_q + i);
    for (const Chunk& c : s.chunks) items.push_back({b, &c});
    first[static_cast<std::size_t>(b + 1)] = items.size();
  }
  std::vector<float> partials(items.size() * static_cast<std::size_t>(out_n + lse_n));
  std::int64_t bytes = 0;
  for (const Item& it : items)
    bytes += cfg.H_kv * static_cast<std::int64_t>(dtype_size(cfg.dtype)) *
             ((static_cast<std::int64_t>(it.chunk->pos.size()) + kernels::kDecodePanel - 1) /
                  kernels::kDecodePanel * kernels::kDecodePanel * D +
              static_cast<std::int64_t>(it.chunk->pos.size()) * Dp);
  const auto n_items = static_cast<std::int64_t>(items.size());
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (std::int64_t j = 0; j < n_items; ++j) {
    const Item& it = items[static_cast<std::size_t>(j)];
    kernels::DecodeQuery dq{S_q,
                            H,
                            cfg.H_kv,
                            D,
                            Dp,
                            q.data() + it.b * out_n,
                            causal ? q_pos[static_cast<std::size_t>(it.b)].data() : nullptr,
                            scale,
                            isa};
    const DecodeChunk chunk{it.chunk->data(), cfg.dtype, it.chunk->pos.data(), cfg.chunk_tokens,
                            static_cast<std::int64_t>(it.chunk->pos.size())};
    float* o = partials.data() + j * (out_n + lse_n);
    if (cfg.kernel == KernelImpl::Reference)
      kernels::decode_chunk_reference(dq, chunk, o, o + out_n);
    else
      kernels::decode_chunk_tiled(dq, chunk, o, o + out_n,
                                  scratch[static_cast<std::size_t>(omp_get_thread_num())]);
  }
  float* out = part;
  float* lse = part + B * out_n;
  std::fill(out, out + B * out_n, 0.0f);
  std::fill(lse, lse + B * lse_n, kNegInf);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (std::int64_t b = 0; b < B; ++b)
    for (std::size_t j = first[static_cast<std::size_t>(b)]; j < first[static_cast<std::size_t>(b + 1)];
         ++j) {
      const float* o = partials.data() + j * static_cast<std::size_t>(out_n + lse_n);
      merge_forward(strategies::bshd_view(out + b * out_n, 1, S_q, H, D),
                    strategies::rows_view(lse + b * lse_n, 1, H, S_q), strategies::bshd_view(o, 1, S_q, H, D),
                    strategies::rows_view(o + out_n, 1, H, S_q));
    }
  stats.kv_bytes_read = bytes;
  stats.chunks = n_items;
}

void DistKVCache::Impl::check_decode(const char* api, const std::vector<std::int64_t>& ids,
                                     const TensorView& q, const TensorView& out, const TensorView& lse,
                                     bool ids_must_exist) const {
  check_device(api, kHost, "q", q, "out", out, "lse", lse);
  const auto B = static_cast<std::int64_t>(ids.size());
  const std::int64_t H = cfg.H, D = cfg.D;
  check_ids(api, ids);
  if (ids_must_exist)
    for (auto id : ids) find(api, id);
  check_kv(api, "q", q, B, H, D);
  check_kv(api, "out", out, B, H, D);
  check_finite(api, "q", q, ids);
  BURST_CHECK(out.shape[1] == q.shape[1], InvalidArgument, api, ": out ", out.describe(), " must match q ",
              q.describe());
  BURST_CHECK(lse.dtype == DType::F32 && lse.ndim == 3 && lse.shape[0] == B && lse.shape[1] == H &&
                  lse.shape[2] == q.shape[1] && lse.is_contiguous(),
              InvalidArgument, api, ": lse ", lse.describe(), " must be contiguous [B=", B, ", H=", H,
              ", S_q=", q.shape[1], "]");
  const auto* ob = static_cast<const char*>(out.data);
  const auto* qb = static_cast<const char*>(q.data);
  const auto span = [](const TensorView& t) {
    std::int64_t e = 1;
    for (int i = 0; i < t.ndim; ++i)
      e += (t.shape[static_cast<std::size_t>(i)] - 1) * t.stride[static_cast<std::size_t>(i)];
    return 4 * e;
  };
  BURST_CHECK(q.numel() == 0 || ob + span(out) <= qb || qb + span(q) <= ob, InvalidArgument, api,
              ": out overlaps q");
}

// The decode after the agreement: local split-KV partials, one all-gather, the rank merge.
void DistKVCache::Impl::run_decode(const std::vector<std::int64_t>& ids, const TensorView& q,
                                   const TensorView& out, const TensorView& lse, bool causal) {
  const auto B = static_cast<std::int64_t>(ids.size());
  const std::int64_t H = cfg.H, D = cfg.D, S_q = q.shape[1];
  const auto before = comm.counters().bytes_sent;
  const auto t0 = Clock::now();
  std::vector<float> qc(static_cast<std::size_t>(q.numel()));
  convert(q, make_view(qc.data(), {B, S_q, H, D}));  // contiguous (q is fp32: a copy)
  const std::int64_t count = B * S_q * H * (D + 1);
  std::vector<float> part(static_cast<std::size_t>(count));
  decode_local(ids, qc, S_q, causal, part.data());
  stats.local_seconds = since(t0);
  const auto t1 = Clock::now();
  std::vector<float> all(static_cast<std::size_t>(count * P));
  if (P > 1)
    comm.all_gather(std::as_bytes(std::span(part)), std::as_writable_bytes(std::span(all)));
  else
    all = std::move(part);
  // Rank merge in rank order (identical on every rank): out starts at (0, −inf).
  device::CpuDevice{}.fill(out, 0.0f);  // the cache is host memory
  std::fill(lse.f32(), lse.f32() + lse.numel(), kNegInf);
  const std::int64_t out_n = B * S_q * H * D;
  for (int r = 0; r < P; ++r) {
    const float* pr = all.data() + r * count;
    merge_forward(out, lse, strategies::bshd_view(pr, B, S_q, H, D),
                  strategies::rows_view(pr + out_n, B, H, S_q));
  }
  stats.merge_seconds = since(t1);
  stats.bytes_sent = comm.counters().bytes_sent - before;
}

void DistKVCache::decode(const std::vector<std::int64_t>& seq_ids, const TensorView& q, const TensorView& out,
                         const TensorView& lse, bool causal) {
  Impl& m = *impl_;
  const char* api = "DistKVCache::decode";
  const auto t0 = Clock::now();
  Fnv args = ids_fingerprint(seq_ids);
  args.add(static_cast<std::uint64_t>(q.ndim == 4 ? q.shape[1] : -1));
  args.add(causal ? 1u : 0u);
  m.agree_call(
      api, [&] { m.check_decode(api, seq_ids, q, out, lse, true); }, args);
  m.stats.check_seconds = since(t0);
  m.run_decode(seq_ids, q, out, lse, causal);
  m.stats.seconds = since(t0);
}

void DistKVCache::decode(const std::vector<std::int64_t>& seq_ids, const TensorView& k_new,
                         const TensorView& v_new, const TensorView& q, const TensorView& out,
                         const TensorView& lse, bool causal) {
  Impl& m = *impl_;
  const char* api = "DistKVCache::decode(k_new, v_new)";
  const auto t0 = Clock::now();
  Fnv args = ids_fingerprint(seq_ids);
  args.add(static_cast<std::uint64_t>(k_new.ndim == 4 ? k_new.shape[1] : -1));
  args.add(static_cast<std::uint64_t>(q.ndim == 4 ? q.shape[1] : -1));
  args.add(causal ? 3u : 2u);
  m.agree_call(
      api,
      [&] {
        m.check_append(api, seq_ids, k_new, v_new);
        m.check_decode(api, seq_ids, q, out, lse, false);
      },
      args);
  m.commit_append(seq_ids, k_new, v_new, m.plan_append(api, seq_ids, k_new.shape[1]));
  m.stats.check_seconds = since(t0);
  m.run_decode(seq_ids, q, out, lse, causal);
  m.stats.seconds = since(t0);
}

}  // namespace burst
