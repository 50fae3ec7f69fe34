// DistKVCache: chunked per-rank K/V storage with replicated metadata (configuration, prefill,
// append, queries). The distributed decode: kv_cache_decode.cc; what both share: kv_cache_internal.h.
// Validation order of every collective call (docs/style.md rule 5): local checks → agreed verdict;
// fingerprint of arguments + replicated state → agreed; then checks on replicated data only (the
// same verdict on every rank without a message); only then is anything mutated or sent.
#include "burst/kv_cache.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "bshd_check.h"
#include "device/cpu/cpu_device.h"
#include "kv_cache_internal.h"

namespace burst {

const char* to_string(AppendPolicy policy) noexcept {
  return policy == AppendPolicy::LeastLoaded ? "least_loaded" : "round_robin";
}

namespace {

std::uint64_t scale_bits(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

}  // namespace

// ---------------------------------------------------------------- shared (kv_cache_internal.h)

namespace kv_cache {

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

void check_finite(const char* api, const char* name, const TensorView& t,
                  const std::vector<std::int64_t>& ids) {
  check_finite_bshd(device::CpuDevice(), t, std::string(api) + ": " + name,
                    [&](std::int64_t b, std::int64_t) {
                      return "sequence id " + std::to_string(ids[static_cast<std::size_t>(b)]);
                    });
}

}  // namespace kv_cache

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
        check_finite(api, "k_local", k_local, seq_ids);
        check_finite(api, "v_local", v_local, seq_ids);
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
  check_finite(api, "k_new", k_new, ids);
  check_finite(api, "v_new", v_new, ids);
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
