// src/kv_cache_internal.h — what the two files of DistKVCache share: kv_cache.cc (storage,
// configuration, prefill, append, queries) and kv_cache_decode.cc (distributed decode). The
// chunked storage, the replicated metadata and the agreement of every collective call
// (DistKVCache::Impl). Not installed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "burst/comm.h"
#include "burst/error.h"
#include "burst/kv_cache.h"
#include "kernels/decode.h"

namespace burst {
namespace kv_cache {

// FNV-1a over 64-bit values: fingerprints of arguments and replicated state.
struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void add(std::uint64_t x) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((x >> (8 * i)) & 0xffu)) * 1099511628211ull;
  }
};

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

/// K, V appended to or kept by the cache: f32 (Unsupported otherwise), then the shared BSHD check.
void check_kv(const char* api, const char* name, const TensorView& t, std::int64_t B, std::int64_t heads,
              std::int64_t D);
/// Fingerprint of a call's sequence ids (in order).
Fnv ids_fingerprint(const std::vector<std::int64_t>& ids);
/// Error(InvalidArgument) unless the sequence ids are distinct.
void check_ids(const char* api, const std::vector<std::int64_t>& ids);
/// check_finite_bshd on the host with the sequence id of the batch row: Error(InvalidArgument)
/// when t [B, S, heads, D] (f32, checked by check_kv) holds a NaN or infinity.
void check_finite(const char* api, const char* name, const TensorView& t,
                  const std::vector<std::int64_t>& ids);

}  // namespace kv_cache

using kv_cache::check_finite;
using kv_cache::check_ids;
using kv_cache::check_kv;
using kv_cache::Chunk;
using kv_cache::Fnv;
using kv_cache::ids_fingerprint;
using kv_cache::Sequence;

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

}  // namespace burst
