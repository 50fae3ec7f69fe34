// DistKVCache: chunked per-rank K/V storage with replicated metadata, and distributed decode
// (Infinite-LLM's DistAttention: local split-KV partials, one all-gather, the lse merge).
// Validation order of every collective call (docs/style.md rule 5): local checks → agreed verdict;
// fingerprint of arguments + replicated state → agreed; then checks on replicated data only (the
// same verdict on every rank without a message); only then is anything mutated or sent.
#include "burst/kv_cache.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "bshd_check.h"
#include "burst/softmax_merge.h"
#include "device/cpu/cpu_device.h"
#include "kernels/decode.h"
#include "strategies/views.h"

namespace burst {

const char* to_string(AppendPolicy policy) noexcept {
  return policy == AppendPolicy::LeastLoaded ? "least_loaded" : "round_robin";
}

namespace {

using kernels::DecodeChunk;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// FNV-1a over 64-bit values: fingerprints of arguments and replicated state.
struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void add(std::uint64_t x) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((x >> (8 * i)) & 0xffu)) * 1099511628211ull;
  }
};

std::uint64_t scale_bits(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

struct Chunk {
  std::vector<float> f32;           // H_kv blocks: Kᵀ panels, then V rows (kernels/decode.h) ...
  std::vector<std::uint16_t> bf16;  // ... in the cache's dtype (the other vector stays empty)
  std::vector<std::int64_t> pos;    // global positions of the tokens in use
  const void* data() const { return f32.empty() ? static_cast<const void*>(bf16.data()) : f32.data(); }
  void* data() { return f32.empty() ? static_cast<void*>(bf16.data()) : f32.data(); }
  std::int64_t bytes() const { return static_cast<std::int64_t>(f32.size() * 4 + bf16.size() * 2); }
};

struct Sequence {
  std::int64_t length = 0;           // global tokens (replicated)
  std::vector<std::int64_t> counts;  // tokens per rank (replicated)
  std::vector<Chunk> chunks;         // this rank's tokens, in increasing position
};

// fp32 view of one operand of the public API, checked: [B, S, heads, D], D contiguous.
/// K, V appended to or kept by the cache: f32 (Unsupported otherwise), then the shared BSHD check.
void check_kv(const char* api, const char* name, const TensorView& t, std::int64_t B, std::int64_t heads,
              std::int64_t D) {
  BURST_CHECK(t.dtype == DType::F32, Unsupported, api, ": ", name, " is ", to_string(t.dtype),
              "; only f32 is supported");
  check_bshd(t, std::string(api) + ": " + name, B, -1, heads, D);
}

Fnv ids_fingerprint(const std::vector<std::int64_t>& ids) {
  Fnv f;
  for (auto id : ids) f.add(static_cast<std::uint64_t>(id));
  return f;
}

void check_ids(const char* api, const std::vector<std::int64_t>& ids) {
  BURST_CHECK(std::set<std::int64_t>(ids.begin(), ids.end()).size() == ids.size(), InvalidArgument, api,
              ": sequence ids must be distinct");
}

}  // namespace

struct DistKVCache::Impl {
  Communicator comm;
  KVCacheConfig cfg;
  int P = 1, rank = 0, threads = 1;
  std::int64_t Dp = 0;
  float scale = 1.0f;
  Isa isa = Isa::Portable;
  std::map<std::int64_t, Sequence> seqs;
  DecodeStats stats;
  std::vector<kernels::DecodeScratch> scratch;

  explicit Impl(const Communicator& c) : comm(c.channel()) {}

  std::int64_t head_floats() const { return kernels::decode_chunk_head_floats(cfg.chunk_tokens, cfg.D, Dp); }

  std::uint64_t state_fingerprint(Fnv f) const {
    for (const auto& [id, s] : seqs) {
      f.add(static_cast<std::uint64_t>(id));
      f.add(static_cast<std::uint64_t>(s.length));
      for (auto c : s.counts) f.add(static_cast<std::uint64_t>(c));
    }
    return f.h;
  }

  // The one agreement of a collective call: the verdict of this rank's local checks (run here,
  // a burst::Error caught) and the fingerprint of the arguments + replicated state, in ONE
  // all-gather of 5 small integers (as fp32, exact). Every rank throws the same Error if any rank's
  // checks failed (that rank's message, via agree_verdict) or if the fingerprints differ.
  template <typename F>
  void agree_call(const char* api, F&& local_checks, const Fnv& args) const {
    bool ok = true;
    std::string msg;
    ErrorKind kind = ErrorKind::InvalidArgument;
    try {
      local_checks();
    } catch (const Error& e) {
      ok = false;
      msg = e.message();
      kind = e.kind();
    }
    comm.set_activity(api);
    const std::uint64_t fp = state_fingerprint(args);
    // A control exchange: a rank absent from (or at another call than) this one is named.
    std::vector<std::int64_t> mine = {ok ? 1 : 0};
    for (int i = 0; i < 4; ++i) mine.push_back(static_cast<std::int64_t>((fp >> (16 * i)) & 0xffffu));
    const std::vector<std::int64_t> all = comm.exchange(mine, std::string(api) + " agreement");
    bool all_ok = true;
    int differs = -1;
    for (int r = 0; r < P; ++r) {
      all_ok = all_ok && all[static_cast<std::size_t>(5 * r)] == 1;
      if (differs < 0 && !std::equal(all.begin() + 5 * r + 1, all.begin() + 5 * r + 5, all.begin() + 1))
        differs = r;
    }
    if (!all_ok) comm.agree_verdict(ok, msg, kind);  // every rank enters: the same Error everywhere
    BURST_CHECK(differs < 0, InvalidArgument, api,
                ": the call differs between ranks in its arguments or the "
                "cache state (sequence ids, lengths, per-rank counts): rank ",
                differs,
                " disagrees with rank 0; "
                "every rank must pass identical values");
  }

  // Tokens rank r holds over all sequences (from replicated metadata: identical everywhere).
  std::int64_t rank_tokens(int r) const {
    std::int64_t n = 0;
    for (const auto& kv : seqs) n += kv.second.counts[static_cast<std::size_t>(r)];
    return n;
  }

  void check_capacity(const char* api, const std::vector<std::int64_t>& extra) const {
    for (int r = 0; r < P; ++r) {
      const std::int64_t need = rank_tokens(r) + extra[static_cast<std::size_t>(r)];
      BURST_CHECK(need <= cfg.capacity_per_rank, InvalidArgument, api, ": cache overflow on rank ", r, ": ",
                  need, " tokens needed, capacity_per_rank=", cfg.capacity_per_rank);
    }
  }

  // Stores one token (k, v rows [H_kv, D] with head strides) at the end of this rank's shard.
  void store(Sequence& s, std::int64_t position, const float* k, std::int64_t k_hs, const float* v,
             std::int64_t v_hs) {
    const std::int64_t C = cfg.chunk_tokens;
    if (s.chunks.empty() || static_cast<std::int64_t>(s.chunks.back().pos.size()) == C) {
      s.chunks.emplace_back();
      const auto n = static_cast<std::size_t>(cfg.H_kv * head_floats());
      if (cfg.dtype == DType::BF16)
        s.chunks.back().bf16.assign(n, 0);
      else
        s.chunks.back().f32.assign(n, 0.0f);
      s.chunks.back().pos.reserve(static_cast<std::size_t>(C));
    }
    Chunk& c = s.chunks.back();
    kernels::decode_chunk_store(c.data(), cfg.dtype, C, cfg.H_kv, cfg.D, Dp,
                                static_cast<std::int64_t>(c.pos.size()), k, v, k_hs, v_hs);
    c.pos.push_back(position);
  }

  // Rank of each appended token of a sequence (replicated decision, no messages).
  std::vector<int> placement(const Sequence& s, std::int64_t n) const {
    std::vector<int> dst(static_cast<std::size_t>(n));
    std::vector<std::int64_t> counts = s.counts;
    for (std::int64_t i = 0; i < n; ++i) {
      int r = 0;
      if (cfg.policy == AppendPolicy::RoundRobin) {
        r = static_cast<int>((s.length + i) % P);
      } else {
        r = static_cast<int>(std::min_element(counts.begin(), counts.end()) - counts.begin());
      }
      ++counts[static_cast<std::size_t>(r)];
      dst[static_cast<std::size_t>(i)] = r;
    }
    return dst;
  }

  const Sequence& find(const char* api, std::int64_t id) const {
    auto it = seqs.find(id);
    BURST_CHECK(it != seqs.end(), InvalidArgument, api, ": unknown sequence id ", id);
    return it->second;
  }

  void decode_local(const std::vector<std::int64_t>& ids, const std::vector<float>& q, std::int64_t S_q,
                    bool causal, float* part);

  void check_append(const char* api, const std::vector<std::int64_t>& ids, const TensorView& k_new,
                    const TensorView& v_new) const;
  void check_decode(const char* api, const std::vector<std::int64_t>& ids, const TensorView& q,
                    const TensorView& out, const TensorView& lse, bool ids_must_exist) const;
  // Placement of the appended tokens (replicated decision) after the capacity check.
  std::vector<std::vector<int>> plan_append(const char* api, const std::vector<std::int64_t>& ids,
                                            std::int64_t n) const;
  void commit_append(const std::vector<std::int64_t>& ids, const TensorView& k_new, const TensorView& v_new,
                     const std::vector<std::vector<int>>& dst);
  void run_decode(const std::vector<std::int64_t>& ids, const TensorView& q, const TensorView& out,
                  const TensorView& lse, bool causal);
};

DistKVCache::DistKVCache(const Communicator& comm, const KVCacheConfig& cfg) {
  auto impl = std::make_unique<Impl>(comm);
  impl->P = impl->comm.size();
  impl->rank = impl->comm.rank();
  impl->comm.agree_on([&] {
    const char* api = "DistKVCache";
    BURST_CHECK(cfg.D >= 1 && cfg.D <= 256, InvalidArgument, api, ": D=", cfg.D, " must be in [1, 256]");
    BURST_CHECK(cfg.H >= 1 && cfg.H_kv >= 1 && cfg.H % cfg.H_kv == 0, InvalidArgument, api, ": H=", cfg.H,
                " must be a positive multiple of H_kv=", cfg.H_kv);
    BURST_CHECK(cfg.capacity_per_rank > 0, InvalidArgument, api,
                ": capacity_per_rank=", cfg.capacity_per_rank, " must be > 0");
    BURST_CHECK(cfg.chunk_tokens > 0 && cfg.chunk_tokens % kernels::kDecodePanel == 0, InvalidArgument, api,
                ": chunk_tokens=", cfg.chunk_tokens, " must be a positive multiple of ",
                kernels::kDecodePanel);
    BURST_CHECK(cfg.num_threads >= 0, InvalidArgument, api, ": num_threads=", cfg.num_threads,
                " must be >= 0");
    BURST_CHECK(cfg.dtype == DType::F32 || cfg.dtype == DType::BF16, Unsupported, api,
                ": dtype=", to_string(cfg.dtype), "; the cache stores f32 or bf16");
    if (cfg.softmax_scale)
      BURST_CHECK(std::isfinite(*cfg.softmax_scale) && *cfg.softmax_scale > 0.0f, InvalidArgument, api,
                  ": softmax_scale=", *cfg.softmax_scale, " must be finite and > 0");
    BURST_CHECK(isa_available(cfg.isa), Unsupported, api, ": isa=", to_string(cfg.isa),
                " requested but this CPU supports at most ", to_string(detect_isa()));
  });
  Fnv f;
  for (auto x : {cfg.H, cfg.H_kv, cfg.D, cfg.capacity_per_rank, cfg.chunk_tokens})
    f.add(static_cast<std::uint64_t>(x));
  f.add(static_cast<std::uint64_t>(cfg.policy));
  f.add(cfg.softmax_scale ? scale_bits(*cfg.softmax_scale) : 1ull << 40);
  f.add(static_cast<std::uint64_t>(cfg.kernel));
  f.add(static_cast<std::uint64_t>(cfg.dtype));
  impl->comm.agree(f.h, "DistKVCache: the configuration");
  impl->cfg = cfg;
  impl->Dp = (cfg.D + kernels::kDecodeMaxWidth - 1) / kernels::kDecodeMaxWidth * kernels::kDecodeMaxWidth;
  impl->scale = cfg.softmax_scale ? *cfg.softmax_scale : static_cast<float>(1.0 / std::sqrt(double(cfg.D)));
  // Decoding is memory-bound vector work: the AMX paths have no decode kernel of their own.
  const bool amx = cfg.isa == Isa::Amx || cfg.isa == Isa::AmxEmulated;
  impl->isa = cfg.isa == Isa::Auto || amx ? detect_isa() : cfg.isa;
  impl->threads = cfg.num_threads > 0 ? cfg.num_threads : std::max(1, omp_get_max_threads());
  impl->scratch.resize(static_cast<std::size_t>(impl->threads));
  impl_ = std::move(impl);
}

DistKVCache::~DistKVCache() = default;
DistKVCache::DistKVCache(DistKVCache&&) noexcept = default;
DistKVCache& DistKVCache::operator=(DistKVCache&&) noexcept = default;

const KVCacheConfig& DistKVCache::config() const { return impl_->cfg; }
int DistKVCache::rank() const { return impl_->rank; }
int DistKVCache::ranks() const { return impl_->P; }
const DecodeStats& DistKVCache::last_stats() const { return impl_->stats; }

void DistKVCache::prefill(const std::vector<std::int64_t>& seq_ids, const TensorView& k_local,
                          const TensorView& v_local, const std::vector<std::int64_t>& positions,
                          std::int64_t S_global) {
  Impl& m = *impl_;
  const char* api = "DistKVCache::prefill";
  const auto B = static_cast<std::int64_t>(seq_ids.size());
  const auto S_local = static_cast<std::int64_t>(positions.size());
  Fnv args = ids_fingerprint(seq_ids);
  args.add(static_cast<std::uint64_t>(S_global));
  m.agree_call(
      api,
      [&] {
        check_device(api, kHost, "k_local", k_local, "v_local", v_local);
        check_ids(api, seq_ids);
        for (auto id : seq_ids)
          BURST_CHECK(!m.seqs.count(id), InvalidArgument, api, ": sequence id ", id, " already exists");
        check_kv(api, "k_local", k_local, B, m.cfg.H_kv, m.cfg.D);
        check_kv(api, "v_local", v_local, B, m.cfg.H_kv, m.cfg.D);
        BURST_CHECK(k_local.shape[1] == S_local && v_local.shape[1] == S_local, InvalidArgument, api,
                    ": k_local ", k_local.describe(), " and v_local ", v_local.describe(),
                    " must have S_local = positions.size() = ", S_local, " rows");
        BURST_CHECK(S_global >= 0, InvalidArgument, api, ": S_global=", S_global, " < 0");
        for (std::int64_t i = 0; i < S_local; ++i) {
          const auto t = positions[static_cast<std::size_t>(i)];
          BURST_CHECK(t >= 0 && t < S_global && (i == 0 || t > positions[static_cast<std::size_t>(i - 1)]),
                      InvalidArgument, api,
                      ": positions must be strictly increasing in [0, S_global=", S_global, "); position[", i,
                      "]=", t);
        }
      },
      args);
  // Per-rank counts and position checksums mod a prime, in one control exchange.
  constexpr std::int64_t kPrime = 1000000007;
  std::int64_t s1 = 0, s2 = 0;
  for (auto t : positions) {
    s1 = (s1 + t % kPrime) % kPrime;
    s2 = (s2 + (t % kPrime) * (t % kPrime) % kPrime) % kPrime;
  }
  const std::vector<std::int64_t> all =
      m.comm.exchange({S_local, s1, s2}, "DistKVCache prefill: per-rank lengths and checksums");
  std::vector<std::int64_t> counts(static_cast<std::size_t>(m.P));
  std::int64_t total = 0, e1 = 0, e2 = 0;
  s1 = s2 = 0;
  for (int r = 0; r < m.P; ++r) {
    const auto i = static_cast<std::size_t>(3 * r);
    counts[static_cast<std::size_t>(r)] = all[i];
    total += all[i];
    s1 = (s1 + all[i + 1]) % kPrime;
    s2 = (s2 + all[i + 2]) % kPrime;
  }
  for (std::int64_t t = 0; t < S_global; ++t) {
    e1 = (e1 + t % kPrime) % kPrime;
    e2 = (e2 + (t % kPrime) * (t % kPrime) % kPrime) % kPrime;
  }
  BURST_CHECK(total == S_global && s1 == e1 && s2 == e2, InvalidArgument, api,
              ": the ranks' positions do not partition [0, S_global=", S_global, ") (", total,
              " tokens over ", m.P, " ranks)");
  std::vector<std::int64_t> extra(counts);
  for (auto& e : extra) e *= B;
  m.check_capacity(api, extra);
  for (std::int64_t b = 0; b < B; ++b) {
    Sequence& s = m.seqs[seq_ids[static_cast<std::size_t>(b)]];
    s.length = S_global;
    s.counts = counts;
    for (std::int64_t i = 0; i < S_local; ++i)
      m.store(s, positions[static_cast<std::size_t>(i)],
              k_local.f32() + b * k_local.stride[0] + i * k_local.stride[1], k_local.stride[2],
              v_local.f32() + b * v_local.stride[0] + i * v_local.stride[1], v_local.stride[2]);
  }
}

void DistKVCache::Impl::check_append(const char* api, const std::vector<std::int64_t>& ids,
                                     const TensorView& k_new, const TensorView& v_new) const {
  check_device(api, kHost, "k_new", k_new, "v_new", v_new);
  const auto B = static_cast<std::int64_t>(ids.size());
  check_ids(api, ids);
  check_kv(api, "k_new", k_new, B, cfg.H_kv, cfg.D);
  check_kv(api, "v_new", v_new, B, cfg.H_kv, cfg.D);
  BURST_CHECK(k_new.shape[1] == v_new.shape[1], InvalidArgument, api, ": k_new ", k_new.describe(),
              " and v_new ", v_new.describe(), " differ in S_new");
}

std::vector<std::vector<int>> DistKVCache::Impl::plan_append(const char* api,
                                                             const std::vector<std::int64_t>& ids,
                                                             std::int64_t n) const {
  std::vector<std::vector<int>> dst;
  std::vector<std::int64_t> extra(static_cast<std::size_t>(P), 0);
  const Sequence empty{0, std::vector<std::int64_t>(static_cast<std::size_t>(P), 0), {}};
  for (auto id : ids) {
    auto it = seqs.find(id);
    dst.push_back(placement(it == seqs.end() ? empty : it->second, n));
    for (int r : dst.back()) ++extra[static_cast<std::size_t>(r)];
  }
  check_capacity(api, extra);
  return dst;
}

void DistKVCache::Impl::commit_append(const std::vector<std::int64_t>& ids, const TensorView& k_new,
                                      const TensorView& v_new, const std::vector<std::vector<int>>& dst) {
  const std::int64_t n = k_new.shape[1];
  for (std::size_t b = 0; b < ids.size(); ++b) {
    auto [it, added] = seqs.try_emplace(ids[b]);
    Sequence& s = it->second;
    if (added) s.counts.assign(static_cast<std::size_t>(P), 0);
    const auto bi = static_cast<std::int64_t>(b);
    for (std::int64_t i = 0; i < n; ++i) {
      const int r = dst[b][static_cast<std::size_t>(i)];
      if (r == rank)
        store(s, s.length + i, k_new.f32() + bi * k_new.stride[0] + i * k_new.stride[1], k_new.stride[2],
              v_new.f32() + bi * v_new.stride[0] + i * v_new.stride[1], v_new.stride[2]);
      ++s.counts[static_cast<std::size_t>(r)];
    }
    s.length += n;
  }
}

void DistKVCache::append(const std::vector<std::int64_t>& seq_ids, const TensorView& k_new,
                         const TensorView& v_new) {
  Impl& m = *impl_;
  const char* api = "DistKVCache::append";
  Fnv args = ids_fingerprint(seq_ids);
  args.add(static_cast<std::uint64_t>(k_new.ndim == 4 ? k_new.shape[1] : -1));
  m.agree_call(
      api, [&] { m.check_append(api, seq_ids, k_new, v_new); }, args);
  m.commit_append(seq_ids, k_new, v_new, m.plan_append(api, seq_ids, k_new.shape[1]));
}

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

void DistKVCache::remove(std::int64_t seq_id) {
  impl_->find("DistKVCache::remove", seq_id);
  impl_->seqs.erase(seq_id);
}

bool DistKVCache::contains(std::int64_t seq_id) const { return impl_->seqs.count(seq_id) > 0; }

std::vector<std::int64_t> DistKVCache::sequences() const {
  std::vector<std::int64_t> ids;
  for (const auto& kv : impl_->seqs) ids.push_back(kv.first);
  return ids;
}

std::int64_t DistKVCache::length(std::int64_t seq_id) const {
  return impl_->find("DistKVCache::length", seq_id).length;
}

std::vector<std::int64_t> DistKVCache::rank_lengths(std::int64_t seq_id) const {
  return impl_->find("DistKVCache::rank_lengths", seq_id).counts;
}

std::vector<std::int64_t> DistKVCache::local_positions(std::int64_t seq_id) const {
  std::vector<std::int64_t> pos;
  for (const Chunk& c : impl_->find("DistKVCache::local_positions", seq_id).chunks)
    pos.insert(pos.end(), c.pos.begin(), c.pos.end());
  return pos;
}

void DistKVCache::local_kv(std::int64_t seq_id, std::vector<float>& k, std::vector<float>& v) const {
  const Impl& m = *impl_;
  const Sequence& s = m.find("DistKVCache::local_kv", seq_id);
  const std::int64_t row = m.cfg.H_kv * m.cfg.D;
  k.clear();
  v.clear();
  for (const Chunk& c : s.chunks)
    for (std::size_t t = 0; t < c.pos.size(); ++t) {
      k.resize(k.size() + static_cast<std::size_t>(row));
      v.resize(v.size() + static_cast<std::size_t>(row));
      kernels::decode_chunk_load(c.data(), m.cfg.dtype, m.cfg.chunk_tokens, m.cfg.H_kv, m.cfg.D, m.Dp,
                                 static_cast<std::int64_t>(t), k.data() + k.size() - row,
                                 v.data() + v.size() - row);
    }
}

std::int64_t DistKVCache::local_tokens() const { return impl_->rank_tokens(impl_->rank); }

std::int64_t DistKVCache::local_bytes() const {
  std::int64_t n = 0;
  for (const auto& kv : impl_->seqs)
    for (const Chunk& c : kv.second.chunks) n += c.bytes();
  return n;
}

}  // namespace burst
