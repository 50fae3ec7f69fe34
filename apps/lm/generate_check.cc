// apps/lm/generate_check.cc — `burst generate`'s self-check (generate.h; what it shares with
// generate.cc: generate_internal.h), on rank 0 alone: every layer's cache gathered to rank 0
// (gather_to_root), the K/V of self-contained prefill ranges recomputed by a LocalEngine
// (CaptureEngine, self_check_ranges), and the first decode steps recomputed over the whole
// gathered cache by the kernel API's fp64 Reference (GatheredEngine).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "burst/error.h"
#include "burst/kv_cache.h"
#include "generate_internal.h"

namespace burst::lm {
using nlohmann::json;

namespace {

// x rounded to the cache's storage dtype and widened back (bf16: round to nearest even, as
// DistKVCache stores it; f32: x).
float as_stored(float x, DType dtype) { return dtype == DType::BF16 ? bf16_to_float(bf16_from_float(x)) : x; }

// The oracle of the self-check, one process: each layer's whole K/V [L, H_kv, D] (gathered from
// the ranks), extended by the new tokens (rounded to the cache's dtype, as the cache stores
// them), attended with the kernel API's fp64 Reference (causal, global positions): with a bf16
// cache, exact attention over the same rounded K/V the distributed decode reads.
class GatheredEngine final : public ForwardOnlyEngine {
 public:
  GatheredEngine(std::vector<LayerKv>& kv, std::vector<std::int64_t> positions, std::int64_t H_kv,
                 std::int64_t D, int threads, DType cache_dtype)
      : kv_(kv),
        positions_(std::move(positions)),
        H_kv_(H_kv),
        D_(D),
        threads_(threads),
        dtype_(cache_dtype) {}
  const std::vector<std::int64_t>& positions() const override { return positions_; }
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override {
    LayerKv& l = kv_.at(layer_++);
    const auto n = static_cast<std::size_t>(k.numel());
    for (std::size_t i = 0; i < n; ++i) {
      l.k.push_back(as_stored(k.f32()[i], dtype_));
      l.v.push_back(as_stored(v.f32()[i], dtype_));
    }
    const auto L = static_cast<std::int64_t>(l.k.size()) / (H_kv_ * D_);
    AttentionParams p;
    p.mask = Mask::causal_mask();
    p.q_positions = positions_.data();
    p.seq_q_global = p.seq_kv_global = L;
    p.num_threads = threads_;
    p.impl = KernelImpl::Reference;  // the fp64 oracle (one materialised score row per query)
    attention_forward(q, make_view(l.k.data(), {1, L, H_kv_, D_}), make_view(l.v.data(), {1, L, H_kv_, D_}),
                      out, lse, p);
  }

 private:
  std::vector<LayerKv>& kv_;
  std::vector<std::int64_t> positions_;
  std::int64_t H_kv_, D_;
  int threads_;
  DType dtype_;
  std::size_t layer_ = 0;
};

}  // namespace

// Rank 0: every rank's cached K/V of sequence 0 in global position order [L, H_kv, D], and (when
// `owner` is given) the rank holding each position; other ranks get nothing. Collective
// (point-to-point to rank 0: nothing is replicated).
LayerKv gather_to_root(const Communicator& comm, const DistKVCache& cache, std::int64_t row,
                       std::vector<int>* owner) {
  constexpr int kTag = 7310;
  LayerKv local;
  cache.local_kv(0, local.k, local.v);
  const auto pos = cache.local_positions(0);
  std::vector<float> pos_f(pos.begin(), pos.end());  // exact: positions < 2^24 (checked by the caller)
  // fp32 values as a message and back.
  const auto to_bytes = [](const std::vector<float>& x) {
    ByteBuffer b(x.size() * sizeof(float));
    if (!x.empty()) std::memcpy(b.data(), x.data(), b.size());
    return b;
  };
  const auto to_floats = [](const ByteBuffer& b) {
    std::vector<float> x(b.size() / sizeof(float));
    if (!x.empty()) std::memcpy(x.data(), b.data(), x.size() * sizeof(float));
    return x;
  };
  if (comm.rank() != 0) {
    RequestSet rs;
    rs.add(comm.isend(to_bytes(pos_f), 0, kTag));
    rs.add(comm.isend(to_bytes(local.k), 0, kTag + 1));
    rs.add(comm.isend(to_bytes(local.v), 0, kTag + 2));
    rs.wait_all();
    return {};
  }
  const std::vector<std::int64_t> counts = cache.rank_lengths(0);
  const std::int64_t L = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  LayerKv all;
  all.k.resize(static_cast<std::size_t>(L * row));
  all.v.resize(all.k.size());
  if (owner != nullptr) owner->assign(static_cast<std::size_t>(L), 0);
  for (int r = 0; r < comm.size(); ++r) {
    std::vector<float> p, k, v;
    if (r == 0) {
      p = std::move(pos_f);
      k = std::move(local.k);
      v = std::move(local.v);
    } else {
      const auto n = static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]);
      const std::size_t kv_bytes = n * static_cast<std::size_t>(row) * sizeof(float);
      p = to_floats(comm.irecv(ByteBuffer(n * sizeof(float)), r, kTag).take());
      k = to_floats(comm.irecv(ByteBuffer(kv_bytes), r, kTag + 1).take());
      v = to_floats(comm.irecv(ByteBuffer(kv_bytes), r, kTag + 2).take());
    }
    for (std::size_t i = 0; i < p.size(); ++i) {
      const auto t = static_cast<std::int64_t>(p[i]);
      std::copy_n(k.begin() + static_cast<std::ptrdiff_t>(i) * row, row, all.k.begin() + t * row);
      std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(i) * row, row, all.v.begin() + t * row);
      if (owner != nullptr) (*owner)[static_cast<std::size_t>(t)] = r;
    }
  }
  return all;
}

namespace {

// One process: LocalEngine over `positions` with the prefill's mask, keeping every layer's K/V rows
// (the single-rank recomputation of a self-contained range of the prefill).
class CaptureEngine final : public ForwardOnlyEngine {
 public:
  CaptureEngine(std::vector<std::int64_t> positions, const Mask& mask, std::int64_t S_global, int threads)
      : inner_(std::move(positions), mask, S_global, threads) {}
  const std::vector<std::int64_t>& positions() const override { return inner_.positions(); }
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override {
    inner_.forward(q, k, v, out, lse);
    BURST_CHECK(k.is_contiguous() && v.is_contiguous(), Internal, "generate: K/V not contiguous");
    kv.push_back(
        {std::vector<float>(k.f32(), k.f32() + k.numel()), std::vector<float>(v.f32(), v.f32() + v.numel())});
  }
  std::vector<LayerKv> kv;  ///< per layer, [n, H_kv, D]

 private:
  LocalEngine inner_;
};

// A range of prefill positions whose K/V depend on nothing outside it (a document's first tokens
// under the document mask, a prefix under the causal one): recomputed on one rank by the self-check.
struct KvRange {
  std::int64_t begin = 0, end = 0;
  std::string why;
};

// The self-check's ranges, at most `cap` tokens each: the start of the document the prompt continues
// and (P > 1) the document that crosses a rank boundary soonest after its start (clipped so that the
// crossing is inside). `docs`: the prefill mask's document offsets; `owner`: rank of each position.
std::vector<KvRange> self_check_ranges(const std::vector<std::int32_t>& docs, const std::vector<int>& owner,
                                       std::int64_t cap) {
  std::vector<KvRange> out;
  const std::size_t n = docs.size() - 1;
  if (n == 0 || docs[n] == 0) return out;
  out.push_back({docs[n - 1], std::min<std::int64_t>(docs[n], docs[n - 1] + cap), "the last document"});
  std::int64_t best = -1, best_cross = cap;
  for (std::size_t d = 0; d < n; ++d)
    for (std::int64_t t = docs[d] + 1; t < docs[d + 1] && t - docs[d] < best_cross; ++t)
      if (owner[static_cast<std::size_t>(t)] != owner[static_cast<std::size_t>(docs[d])]) {
        best = static_cast<std::int64_t>(d);
        best_cross = t - docs[d];
        break;
      }
  if (best >= 0 && best != static_cast<std::int64_t>(n - 1)) {
    const auto b = docs[static_cast<std::size_t>(best)], e = docs[static_cast<std::size_t>(best) + 1];
    out.push_back({b, std::min<std::int64_t>(e, b + std::max<std::int64_t>(cap, best_cross + 1)),
                   "a document crossing ranks"});
  }
  return out;
}

}  // namespace

void self_check_on_root(Model& model, const GenerateOptions& o, const std::vector<std::int64_t>& seq,
                        std::int64_t n_pre, std::int64_t S_padded, const Mask& mask,
                        const std::vector<std::int32_t>& docs, const std::vector<int>& owner,
                        std::vector<LayerKv>& gathered, const std::vector<std::vector<std::int64_t>>& fed,
                        const std::vector<std::vector<float>>& logits_seen, double& kv_rel, double& max_rel,
                        json& checked) {
  const ModelConfig& mc = model.config();
  const std::int64_t row = mc.kv_heads * mc.head_dim;
  for (const KvRange& r : self_check_ranges(docs, owner, o.verify_kv_tokens)) {
    std::vector<std::int64_t> positions(static_cast<std::size_t>(r.end - r.begin));
    std::iota(positions.begin(), positions.end(), r.begin);
    std::vector<std::int64_t> tokens(seq.begin() + r.begin, seq.begin() + r.end);
    CaptureEngine ce(positions, mask, S_padded, std::max(1, o.run.dist.num_threads));
    model.forward(torch::from_blob(tokens.data(), {size_of(tokens)}, torch::kInt64), ce);
    double rel = 0;
    for (std::size_t l = 0; l < ce.kv.size(); ++l)
      for (int kv = 0; kv < 2; ++kv) {
        const std::vector<float>& want = kv == 0 ? ce.kv[l].k : ce.kv[l].v;
        std::vector<float>& have = kv == 0 ? gathered[l].k : gathered[l].v;
        double diff = 0, scale = 0;
        for (std::size_t j = 0; j < want.size(); ++j) {
          const std::size_t at = static_cast<std::size_t>(r.begin * row) + j;
          diff = std::max(diff, std::fabs(static_cast<double>(want[j]) - have[at]));
          scale = std::max(scale, std::fabs(static_cast<double>(want[j])));
          have[at] = as_stored(want[j], o.run.dtype);  // what a correct cache holds
        }
        rel = std::max(rel, scale > 0 ? diff / scale : diff);
      }
    kv_rel = std::max(kv_rel, rel);
    std::set<int> ranks_holding;
    for (std::int64_t t = r.begin; t < r.end; ++t) ranks_holding.insert(owner[static_cast<std::size_t>(t)]);
    checked.push_back({{"range", {r.begin, r.end}},
                       {"what", r.why},
                       {"ranks_holding", ranks_holding.size()},
                       {"kv_rel_err", rel}});
  }
  std::int64_t p = n_pre;
  for (std::size_t i = 0; i < fed.size(); ++i) {
    std::vector<std::int64_t> positions(fed[i].size());
    std::iota(positions.begin(), positions.end(), p);
    GatheredEngine ge(gathered, positions, mc.kv_heads, mc.head_dim, std::max(1, o.run.dist.num_threads),
                      o.run.dtype);
    const auto want = last_logits(model, fed[i], ge);
    double diff = 0, scale = 0;
    for (std::size_t j = 0; j < want.size(); ++j) {
      diff = std::max(diff, std::fabs(static_cast<double>(want[j]) - logits_seen[i][j]));
      scale = std::max(scale, std::fabs(static_cast<double>(want[j])));
    }
    max_rel = std::max(max_rel, scale > 0 ? diff / scale : diff);
    p += size_of(fed[i]);
  }
}

}  // namespace burst::lm
