// apps/lm/generate.cc — `burst generate` (generate.h): prefill into sharded KV caches, then
// decode token by token; the single-rank self-check.
#include "generate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <random>

#include "burst/error.h"
#include "burst/kv_cache.h"
#include "engine_factory.h"
#include "runtime.h"
#include "vocab.h"

namespace burst::lm {
using nlohmann::json;

namespace {

std::int64_t size_of(const std::vector<std::int64_t>& v) { return static_cast<std::int64_t>(v.size()); }

// Inference engines: forward only.
class ForwardOnlyEngine : public AttentionEngine {
 public:
  void backward(const TensorView&, const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                const TensorView&, const TensorView&, const TensorView&, const TensorView&) override {
    BURST_FAIL(Unsupported, "generate: inference engines have no backward");
  }
};

// The prefill: the inner (distributed) engine's forward, then each layer's local K/V into its cache.
class PrefillEngine final : public ForwardOnlyEngine {
 public:
  PrefillEngine(AttentionEngine& inner, std::vector<DistKVCache>& caches, std::int64_t S)
      : inner_(inner), caches_(caches), S_(S) {}
  const std::vector<std::int64_t>& positions() const override { return inner_.positions(); }
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override {
    inner_.forward(q, k, v, out, lse);
    caches_.at(layer_++).prefill({0}, k, v, inner_.positions(), S_);
  }

 private:
  AttentionEngine& inner_;
  std::vector<DistKVCache>& caches_;
  std::int64_t S_;
  std::size_t layer_ = 0;
};

// One decode step: each layer appends the new tokens' K/V and attends their queries over its cache.
class DecodeEngine final : public ForwardOnlyEngine {
 public:
  DecodeEngine(std::vector<DistKVCache>& caches, std::vector<std::int64_t> positions)
      : caches_(caches), positions_(std::move(positions)) {}
  const std::vector<std::int64_t>& positions() const override { return positions_; }
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override {
    DistKVCache& c = caches_.at(layer_++);
    c.append({0}, k, v);
    c.decode({0}, q, out, lse, true);
    totals_.bytes_sent += c.last_stats().bytes_sent;
    totals_.forward_seconds += c.last_stats().seconds;
  }

 private:
  std::vector<DistKVCache>& caches_;
  std::vector<std::int64_t> positions_;
  std::size_t layer_ = 0;
};

// The oracle of the self-check, one process: each layer's whole K/V [L, H_kv, D] (gathered from
// the ranks), extended by the new tokens, attended with the kernel API (causal, global positions).
struct LayerKv { std::vector<float> k, v; };
class GatheredEngine final : public ForwardOnlyEngine {
 public:
  GatheredEngine(std::vector<LayerKv>& kv, std::vector<std::int64_t> positions, std::int64_t H_kv, std::int64_t D,
                 int threads)
      : kv_(kv), positions_(std::move(positions)), H_kv_(H_kv), D_(D), threads_(threads) {}
  const std::vector<std::int64_t>& positions() const override { return positions_; }
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override {
    LayerKv& l = kv_.at(layer_++);
    const auto n = static_cast<std::size_t>(k.numel());
    l.k.insert(l.k.end(), k.f32(), k.f32() + n);
    l.v.insert(l.v.end(), v.f32(), v.f32() + n);
    const auto L = static_cast<std::int64_t>(l.k.size()) / (H_kv_ * D_);
    AttentionParams p;
    p.mask = Mask::causal_mask();
    p.q_positions = positions_.data();
    p.seq_q_global = p.seq_kv_global = L;
    p.num_threads = threads_;
    attention_forward(q, make_view(l.k.data(), {1, L, H_kv_, D_}), make_view(l.v.data(), {1, L, H_kv_, D_}), out, lse,
                      p);
  }

 private:
  std::vector<LayerKv>& kv_;
  std::vector<std::int64_t> positions_;
  std::int64_t H_kv_, D_;
  int threads_;
  std::size_t layer_ = 0;
};

// Every rank's cached K/V of sequence 0, in global position order [L, H_kv, D]. Collective.
LayerKv gather_cache(const Communicator& comm, const DistKVCache& cache, std::int64_t row) {
  LayerKv local, all;
  cache.local_kv(0, local.k, local.v);
  const auto pos = cache.local_positions(0);
  std::vector<float> pos_f(pos.begin(), pos.end());   // exact: positions < 2^24
  std::vector<std::int64_t> counts = cache.rank_lengths(0), rows(counts);
  for (auto& c : rows) c *= row;
  const std::int64_t L = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  std::vector<float> all_pos(static_cast<std::size_t>(L)), k(static_cast<std::size_t>(L * row)), v(k.size());
  comm.all_gather_v(pos_f.data(), counts, all_pos.data());
  comm.all_gather_v(local.k.data(), rows, k.data());
  comm.all_gather_v(local.v.data(), rows, v.data());
  all.k.resize(k.size());
  all.v.resize(v.size());
  for (std::int64_t i = 0; i < L; ++i) {
    const auto t = static_cast<std::int64_t>(all_pos[static_cast<std::size_t>(i)]);
    std::copy(k.begin() + i * row, k.begin() + (i + 1) * row, all.k.begin() + t * row);
    std::copy(v.begin() + i * row, v.begin() + (i + 1) * row, all.v.begin() + t * row);
  }
  return all;
}

// Logits [V] of the last row of the model's output on `tokens` through `engine`.
std::vector<float> last_logits(Model& model, const std::vector<std::int64_t>& tokens, AttentionEngine& engine) {
  std::vector<std::int64_t> t(tokens);
  const auto hidden = model.forward(torch::from_blob(t.data(), {size_of(t)}, torch::kInt64), engine);
  const auto logits = torch::matmul(hidden[hidden.size(0) - 1], model.head().t()).contiguous();
  return std::vector<float>(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
}

// Temperature + top-k sampling (greedy for temperature 0).
std::int64_t sample(const std::vector<float>& logits, double temperature, int top_k, std::mt19937_64& rng) {
  std::vector<std::int64_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const auto k = static_cast<std::size_t>(top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(top_k), ids.size())
                                                    : ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                    [&](auto a, auto b) { return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)]; });
  if (temperature <= 0) return ids[0];
  std::vector<double> w(k);
  const double top = logits[static_cast<std::size_t>(ids[0])];
  for (std::size_t i = 0; i < k; ++i) w[i] = std::exp((logits[static_cast<std::size_t>(ids[i])] - top) / temperature);
  std::discrete_distribution<std::size_t> pick(w.begin(), w.end());
  return ids[pick(rng)];
}

// The prefill's mask over [0, S_p): causal, or document-causal over the books of the context with
// the prompt appended to the last book.
Mask prefill_mask(const Corpus& corpus, std::int64_t n_ctx, std::int64_t S_p, bool causal) {
  if (causal) return Mask::causal_mask();
  std::vector<std::int32_t> cu{0};
  for (const auto off : corpus.book_offsets)
    if (off > 0 && off < std::min(n_ctx, S_p)) cu.push_back(static_cast<std::int32_t>(off));
  cu.push_back(static_cast<std::int32_t>(S_p));
  return Mask::document(cu, true);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(std::min<double>(static_cast<double>(v.size() - 1), std::ceil(p * static_cast<double>(v.size())) - 1))];
}

}  // namespace

json run_generate(const GenerateOptions& o, const Communicator& comm) {
  const int P = comm.size(), rank = comm.rank();
  const bool log = o.run.verbose && rank == 0;
  Corpus corpus;
  Checkpoint ckpt;
  std::vector<std::int64_t> seq;
  std::vector<std::int32_t> prompt_ids;
  std::unique_ptr<Vocab> vocab;
  std::int64_t n_ctx = 0;
  comm.agree_on([&] {
    BURST_CHECK(o.max_new_tokens >= 1 && o.top_k >= 0 && o.temperature >= 0 && o.verify_tokens >= 0 &&
                    o.context_tokens >= -1,
                InvalidArgument, "generate: max_new_tokens=", o.max_new_tokens, " (>= 1), top_k=", o.top_k,
                ", temperature=", o.temperature, ", verify_tokens=", o.verify_tokens, ", context=", o.context_tokens,
                " (>= 0 or all)");
    corpus = load_corpus(o.run.data_dir);
    ckpt = load_lm_checkpoint(o.checkpoint, corpus, o.run.data_dir);
    vocab = std::make_unique<Vocab>(Vocab::load(o.run.data_dir));
    prompt_ids = vocab->encode(o.prompt);
    n_ctx = o.context_tokens < 0 ? corpus.num_tokens() : std::min(o.context_tokens, corpus.num_tokens());
    seq.assign(corpus.tokens.begin(), corpus.tokens.begin() + n_ctx);
    seq.insert(seq.end(), prompt_ids.begin(), prompt_ids.end());
    BURST_CHECK(!seq.empty(), InvalidArgument, "generate: empty context and prompt");
  });
  torch::NoGradGuard no_grad;
  Model model = model_from_checkpoint(ckpt);
  const ModelConfig& mc = model.config();
  const auto S = size_of(seq);
  const std::int64_t S_p = (S - 1) / (4 * P) * (4 * P);   // prefill length: divides every layout
  if (log)
    std::cerr << "generate: context " << n_ctx << " tokens + prompt " << prompt_ids.size() << " tokens = " << S << " as one " << (o.prefill_causal ? "causal" : "document-causal") << " sequence on " << P
              << " ranks (" << to_string(o.run.dist.strategy) << " / " << to_string(o.run.dist.layout)
              << "), model step " << ckpt.header.at("step") << "\n";

  return abort_on_failure(comm, "burst generate", [&]() -> json {
    KVCacheConfig kc;
    kc.H = mc.heads;
    kc.H_kv = mc.kv_heads;
    kc.D = mc.head_dim;
    kc.capacity_per_rank = S + o.max_new_tokens + 1;
    kc.chunk_tokens = o.chunk_tokens;
    kc.num_threads = o.run.dist.num_threads;
    std::vector<DistKVCache> caches;
    for (int l = 0; l < mc.layers; ++l) caches.emplace_back(comm, kc);

    // Prefill.
    const Stopwatch prefill_sw;
    if (S_p > 0) {
      auto engine = make_engine(o.run, comm, mc, S_p, prefill_mask(corpus, n_ctx, S_p, o.prefill_causal));
      PrefillEngine pe(*engine, caches, S_p);
      std::vector<std::int64_t> local;
      for (const auto p : engine->positions()) local.push_back(seq[static_cast<std::size_t>(p)]);
      model.forward(torch::from_blob(local.data(), {size_of(local)}, torch::kInt64), pe);
    } else {
      for (auto& c : caches) c.append({0}, make_view(static_cast<float*>(nullptr), {1, 0, mc.kv_heads, mc.head_dim}),
                                      make_view(static_cast<float*>(nullptr), {1, 0, mc.kv_heads, mc.head_dim}));
    }
    const double prefill_seconds = comm.all_reduce_max(prefill_sw.seconds());
    if (log) std::cerr << "generate: prefilled " << S_p << " tokens in " << prefill_seconds << " s\n";
    std::vector<LayerKv> gathered;
    if (o.verify_tokens > 0)
      for (auto& c : caches) gathered.push_back(gather_cache(comm, c, mc.kv_heads * mc.head_dim));

    // Decode: first the prefill's tail (the rest of the prompt), then one sampled token per step.
    std::mt19937_64 rng(o.seed);
    std::vector<std::int64_t> pending(seq.begin() + S_p, seq.end()), generated;
    std::vector<std::vector<std::int64_t>> fed;
    std::vector<std::vector<float>> logits_seen;
    std::vector<double> step_seconds;
    std::int64_t bytes_per_token = 0, pos = S_p;
    double tail_seconds = 0;
    for (int i = 0; i < o.max_new_tokens; ++i) {
      const Stopwatch sw;
      std::vector<std::int64_t> positions(pending.size());
      std::iota(positions.begin(), positions.end(), pos);
      DecodeEngine de(caches, positions);
      const auto logits = last_logits(model, pending, de);
      const std::int64_t mine = rank == 0 ? sample(logits, o.temperature, o.top_k, rng) : -1;
      const std::int64_t tok = comm.all_reduce_max(mine);   // rank 0's choice on every rank
      const double s = comm.all_reduce_max(sw.seconds());
      if (i == 0) {
        tail_seconds = s;
      } else {
        step_seconds.push_back(s);
        bytes_per_token = comm.all_reduce_max(de.totals().bytes_sent);
      }
      if (i < o.verify_tokens) {
        fed.push_back(pending);
        logits_seen.push_back(logits);
      }
      pos += size_of(pending);
      generated.push_back(tok);
      pending = {tok};
    }

    // Self-check on rank 0: the same steps, one process, attention over the gathered cache.
    double max_rel = 0;
    if (rank == 0 && o.verify_tokens > 0) {
      std::int64_t p = S_p;
      for (std::size_t i = 0; i < fed.size(); ++i) {
        std::vector<std::int64_t> positions(fed[i].size());
        std::iota(positions.begin(), positions.end(), p);
        GatheredEngine ge(gathered, positions, mc.kv_heads, mc.head_dim, std::max(1, o.run.dist.num_threads));
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
    max_rel = comm.all_reduce_max(max_rel);
    const bool verified = o.verify_tokens > 0 && max_rel <= o.verify_rtol;
    const double median = percentile(step_seconds, 0.5), p99 = percentile(step_seconds, 0.99);
    const double mean = step_seconds.empty() ? 0 : std::accumulate(step_seconds.begin(), step_seconds.end(), 0.0) /
                                                       static_cast<double>(step_seconds.size());
    const std::string text = vocab->decode(std::vector<std::int32_t>(generated.begin(), generated.end()));
    if (log) {
      std::cerr << "generate: prompt: " << o.prompt << "\n"
                << "generate: continuation: " << text << "\n"
                << "generate: prefill " << prefill_seconds << " s (+ " << tail_seconds << " s for the last "
                << S - S_p << " prompt tokens); per token median " << median * 1e3 << " ms, p99 " << p99 * 1e3
                << " ms, " << (mean > 0 ? 1.0 / mean : 0.0) << " tokens/s, " << bytes_per_token
                << " bytes/token sent per rank\n"
                << "generate: self-check (" << fed.size() << " steps recomputed on one rank): max rel err "
                << max_rel << (verified ? " PASSED" : " FAILED") << "\n";
    }
    std::int64_t kv_bytes = 0;
    for (const auto& c : caches) kv_bytes += c.local_tokens() * mc.kv_heads * mc.head_dim * 2 * 4;
    return json{{"ranks", P},
                {"strategy", to_string(o.run.dist.strategy)},
                {"layout", to_string(o.run.dist.layout)},
                {"context_tokens", n_ctx},
                {"prompt_tokens", prompt_ids.size()},
                {"prefill_tokens", S_p},
                {"prefill_mask", o.prefill_causal ? "causal" : "causal_document"},
                {"prefill_seconds", prefill_seconds},
                {"tail_seconds", tail_seconds},
                {"new_tokens", generated.size()},
                {"seconds_per_token_median", median},
                {"seconds_per_token_p99", p99},
                {"tokens_per_second", mean > 0 ? 1.0 / mean : 0.0},
                {"bytes_per_token", bytes_per_token},
                {"kv_bytes_per_rank", comm.all_reduce_max(kv_bytes)},
                {"temperature", o.temperature},
                {"top_k", o.top_k},
                {"seed", o.seed},
                {"prompt", o.prompt},
                {"text", text},
                {"verified", verified},
                {"verify_steps", fed.size()},
                {"verify_max_rel_err", max_rel}};
  });
}

}  // namespace burst::lm
