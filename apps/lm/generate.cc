// apps/lm/generate.cc — `burst generate` (generate.h): the options' checks, prefill into sharded KV
// caches, then decode token by token with sampling on rank 0, and the report. The single-rank
// self-check: generate_check.cc; what both share: generate_internal.h.
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
#include "generate_internal.h"
#include "kv_dump.h"
#include "runtime.h"
#include "vocab.h"

namespace burst::lm {
using nlohmann::json;

std::vector<float> last_logits(Model& model, const std::vector<std::int64_t>& tokens,
                               AttentionEngine& engine) {
  std::vector<std::int64_t> t(tokens);
  const auto hidden = model.forward(torch::from_blob(t.data(), {size_of(t)}, torch::kInt64), engine);
  const auto logits = torch::matmul(hidden[hidden.size(0) - 1], model.head().t()).contiguous();
  return std::vector<float>(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
}

namespace {

// One decode step: each layer appends the new tokens' K/V and attends their queries over its cache
// (two collectives per layer: the agreement and the all-gather of partials).
class DecodeEngine final : public ForwardOnlyEngine {
 public:
  DecodeEngine(std::vector<DistKVCache>& caches, std::vector<std::int64_t> positions)
      : caches_(caches), positions_(std::move(positions)) {}
  const std::vector<std::int64_t>& positions() const override { return positions_; }
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override {
    DistKVCache& c = caches_.at(layer_++);
    c.decode({0}, k, v, q, out, lse, true);  // append + decode under one agreement
    totals_.bytes_sent += c.last_stats().bytes_sent;
    totals_.forward_seconds += c.last_stats().seconds;
    kv_bytes_read_ += c.last_stats().kv_bytes_read;
  }
  /// K/V bytes this rank's decode kernels streamed in this step, all layers (DecodeStats).
  std::int64_t kv_bytes_read() const { return kv_bytes_read_; }

 private:
  std::vector<DistKVCache>& caches_;
  std::vector<std::int64_t> positions_;
  std::size_t layer_ = 0;
  std::int64_t kv_bytes_read_ = 0;
};

// Temperature + top-k sampling (greedy for temperature 0).
std::int64_t sample(const std::vector<float>& logits, double temperature, int top_k, std::mt19937_64& rng) {
  std::vector<std::int64_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const auto k = static_cast<std::size_t>(
      top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(top_k), ids.size()) : ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                    [&](auto a, auto b) {
                      return logits[static_cast<std::size_t>(a)] > logits[static_cast<std::size_t>(b)];
                    });
  if (temperature <= 0) return ids[0];
  std::vector<double> w(k);
  const double top = logits[static_cast<std::size_t>(ids[0])];
  for (std::size_t i = 0; i < k; ++i)
    w[i] = std::exp((logits[static_cast<std::size_t>(ids[i])] - top) / temperature);
  std::discrete_distribution<std::size_t> pick(w.begin(), w.end());
  return ids[pick(rng)];
}

// The prefill's document offsets over [0, n_pre): one document (causal), or the books of the
// context (document-causal).
std::vector<std::int32_t> prefill_documents(const Corpus& corpus, std::int64_t n_pre, bool causal) {
  std::vector<std::int32_t> cu{0};
  if (!causal)
    for (const auto off : corpus.book_offsets)
      if (off > 0 && off < n_pre) cu.push_back(static_cast<std::int32_t>(off));
  cu.push_back(static_cast<std::int32_t>(n_pre));
  return cu;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(
      std::min<double>(static_cast<double>(v.size() - 1), std::ceil(p * static_cast<double>(v.size())) - 1))];
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
    BURST_CHECK(!o.run.tensor_parallel, InvalidArgument,
                "burst generate shards the KV cache over the sequence and has no tensor-parallel mode: "
                "use a context-parallel --strategy (burst, ring, ...)");
    BURST_CHECK(o.max_new_tokens >= 1 && o.top_k >= 0 && o.temperature >= 0 && o.verify_tokens >= 0 &&
                    o.context_tokens >= -1,
                InvalidArgument, "generate: max_new_tokens=", o.max_new_tokens, " (>= 1), top_k=", o.top_k,
                ", temperature=", o.temperature, ", verify_tokens=", o.verify_tokens,
                ", context=", o.context_tokens, " (>= 0 or all)");
    corpus = load_corpus(o.run.data_dir);
    ckpt = load_lm_checkpoint(o.checkpoint, corpus, o.run.data_dir);
    vocab = std::make_unique<Vocab>(Vocab::load(o.run.data_dir));
    prompt_ids = vocab->encode(o.prompt);
    n_ctx = o.context_tokens < 0 ? corpus.num_tokens() : std::min(o.context_tokens, corpus.num_tokens());
    seq.assign(corpus.tokens.begin(), corpus.tokens.begin() + n_ctx);
    seq.insert(seq.end(), prompt_ids.begin(), prompt_ids.end());
    BURST_CHECK(!seq.empty(), InvalidArgument, "generate: empty context and prompt");
    BURST_CHECK(size_of(seq) + o.max_new_tokens < (std::int64_t{1} << 24), InvalidArgument,
                "generate: ", size_of(seq), " context + prompt tokens and ", o.max_new_tokens,
                " new tokens exceed 2^24 positions (the self-check ships positions as fp32)");
  });
  torch::NoGradGuard no_grad;
  Model model = model_from_checkpoint(ckpt);
  const ModelConfig& mc = model.config();
  const auto S = size_of(seq);
  // The prefill is the context alone — the first decode step needs a token, so with an empty
  // prompt the context's last token is held back for it — padded as `burst eval` pads it: the
  // same forward, whose K/V `burst eval --save-kv` keeps (kv_dump.h).
  const std::int64_t n_pre = prompt_ids.empty() ? n_ctx - 1 : n_ctx;
  const std::int64_t S_padded = n_pre > 0 ? padded_length(n_pre, P) : 0;
  const std::string mask_kind = o.prefill_causal ? "causal" : "causal_document";
  if (log)
    std::cerr << "generate: context " << n_ctx << " tokens (" << mask_kind
              << ", as burst eval runs it) + prompt " << prompt_ids.size() << " tokens on " << P << " ranks ("
              << to_string(o.run.dist.strategy) << " / " << to_string(o.run.dist.layout) << "), model step "
              << ckpt.header.at("step") << "\n";

  return abort_on_failure(comm, "burst generate", [&]() -> json {
    KVCacheConfig kc;
    kc.H = mc.heads;
    kc.H_kv = mc.kv_heads;
    kc.D = mc.head_dim;
    kc.capacity_per_rank = S + o.max_new_tokens + 1;
    kc.chunk_tokens = o.chunk_tokens;
    kc.num_threads = o.run.dist.num_threads;
    kc.dtype = o.run.dtype;  // F32 or BF16 storage; every call's inputs and outputs stay fp32
    std::vector<DistKVCache> caches;
    for (int l = 0; l < mc.layers; ++l) caches.emplace_back(comm, kc);

    // Prefill: each layer's K/V of the context, from `burst eval --save-kv` when its shards match
    // this run on every rank (kv_from), else one distributed forward over the whole context (the
    // eval path, the last layer's attention skipped); then into the layer's cache where the layout
    // put it — nothing moves afterwards.
    const Stopwatch prefill_sw;
    const std::vector<std::int32_t> docs = prefill_documents(corpus, n_pre, o.prefill_causal);
    const Window w =
        make_window(corpus, 0, std::max<std::int64_t>(n_pre, 1), std::max<std::int64_t>(S_padded, 4 * P));
    const Mask mask = o.prefill_causal ? Mask::causal_mask() : w.mask;
    double attention_seconds = 0, cache_seconds = 0;
    std::string kv_source = "prefill", kv_rejected;
    std::uint64_t fingerprint = 0;
    if (n_pre > 0) {
      RunOptions prefill = o.run;
      prefill.dtype = DType::F32;  // the model and the prefill run fp32; --dtype is the cache's
      KvShard shard;
      bool mine = false;
      if (!o.kv_from.empty())
        mine = load_kv_shard(kv_shard_path(o.kv_from, rank, P),
                             kv_shard_key(model, corpus, n_pre, S_padded, mask_kind, prefill, rank, P), shard,
                             kv_rejected);
      // Every rank's shard or none: the same verdict everywhere.
      const bool all = comm.all_reduce_max(std::int64_t{mine ? 0 : 1}) == 0;
      if (all) {
        kv_source = "eval";
      } else {
        if (mine) kv_rejected = "another rank's shard does not match";
        shard = KvShard{};
        auto engine = make_engine(prefill, comm, mc, S_padded, mask);
        KvCaptureEngine capture(*engine, n_pre, mc.layers, true);
        std::vector<std::int64_t> in, tg;
        std::vector<float> wt;
        gather_window(corpus, w, engine->positions(), in, tg, wt);
        model.forward(torch::from_blob(in.data(), {size_of(in)}, torch::kInt64), capture);
        attention_seconds = comm.all_reduce_max(engine->totals().forward_seconds);
        cache_seconds = capture.copy_seconds();
        shard = std::move(capture.shard());
      }
      fingerprint = kv_shard_fingerprint(shard);
      const Stopwatch fill_sw;
      const auto n = size_of(shard.positions);
      for (std::size_t l = 0; l < caches.size(); ++l) {
        caches[l].prefill({0}, make_view(shard.k[l].data(), {1, n, mc.kv_heads, mc.head_dim}),
                          make_view(shard.v[l].data(), {1, n, mc.kv_heads, mc.head_dim}), shard.positions,
                          n_pre);
        shard.k[l] = {};
        shard.v[l] = {};
      }
      cache_seconds = comm.all_reduce_max(cache_seconds + fill_sw.seconds());
    } else {
      for (auto& c : caches)
        c.append({0}, make_view(static_cast<float*>(nullptr), {1, 0, mc.kv_heads, mc.head_dim}),
                 make_view(static_cast<float*>(nullptr), {1, 0, mc.kv_heads, mc.head_dim}));
    }
    const double prefill_seconds = comm.all_reduce_max(prefill_sw.seconds());
    if (log)
      std::cerr << "generate: prefilled " << n_pre << " tokens in " << prefill_seconds << " s (K/V from "
                << (kv_source == "eval" ? "burst eval --save-kv " + o.kv_from.string()
                                        : std::string("a forward"))
                << (kv_rejected.empty() ? "" : "; the saved K/V were not used: " + kv_rejected)
                << "; attention " << attention_seconds << " s, cache fill " << cache_seconds << " s)\n";
    // The self-check's oracle cache, on rank 0 only.
    const Stopwatch gather_sw;
    std::vector<LayerKv> gathered;
    std::vector<int> owner;
    if (o.verify_tokens > 0)
      for (auto& c : caches)
        gathered.push_back(
            gather_to_root(comm, c, mc.kv_heads * mc.head_dim, gathered.empty() ? &owner : nullptr));
    double verify_seconds = gather_sw.seconds();

    // Decode: first the prefill's tail (the rest of the prompt), then one sampled token per step.
    std::mt19937_64 rng(o.seed);
    std::vector<std::int64_t> pending(seq.begin() + n_pre, seq.end()), generated;
    std::vector<std::vector<std::int64_t>> fed;
    std::vector<std::vector<float>> logits_seen;
    std::vector<double> step_seconds;
    std::int64_t bytes_per_token = 0, kv_read_per_token = 0, pos = n_pre;
    double tail_seconds = 0;
    for (int i = 0; i < o.max_new_tokens; ++i) {
      const Stopwatch sw;
      std::vector<std::int64_t> positions(pending.size());
      std::iota(positions.begin(), positions.end(), pos);
      DecodeEngine de(caches, positions);
      const auto logits = last_logits(model, pending, de);
      const std::int64_t mine = rank == 0 ? sample(logits, o.temperature, o.top_k, rng) : -1;
      const std::int64_t tok = comm.all_reduce_max(mine);  // rank 0's choice on every rank
      const double s = sw.seconds();  // this rank's; the max over ranks is taken after the loop
      if (i == 0) {
        tail_seconds = s;
      } else {
        step_seconds.push_back(s);
        bytes_per_token = std::max(bytes_per_token, de.totals().bytes_sent);
        kv_read_per_token = std::max(kv_read_per_token, de.kv_bytes_read());
      }
      if (i < o.verify_tokens) {
        fed.push_back(pending);
        logits_seen.push_back(logits);
      }
      pos += size_of(pending);
      generated.push_back(tok);
      pending = {tok};
    }

    tail_seconds = comm.all_reduce_max(tail_seconds);
    for (double& t : step_seconds) t = comm.all_reduce_max(t);
    bytes_per_token = comm.all_reduce_max(bytes_per_token);
    kv_read_per_token = comm.all_reduce_max(kv_read_per_token);

    // Self-check on rank 0, one process, no sharding, no merge (generate_check.cc).
    double max_rel = 0, kv_rel = 0;
    json checked = json::array();
    const Stopwatch verify_sw;
    if (rank == 0 && o.verify_tokens > 0)
      self_check_on_root(model, o, seq, n_pre, S_padded, mask, docs, owner, gathered, fed, logits_seen,
                         kv_rel, max_rel, checked);
    verify_seconds = comm.all_reduce_max(verify_seconds + verify_sw.seconds());
    kv_rel = comm.all_reduce_max(kv_rel);
    max_rel = comm.all_reduce_max(max_rel);
    // The cache against K/V recomputed in fp32: equal within verify_rtol, plus with a bf16 cache
    // its rounding — at most 2^-8 of each value, so of the largest (kv_rel is relative to it).
    const double kv_tol = o.verify_rtol + (o.run.dtype == DType::BF16 ? 1.0 / 256 : 0.0);
    const bool verified = o.verify_tokens > 0 && max_rel <= o.verify_rtol && kv_rel <= kv_tol;
    const double median = percentile(step_seconds, 0.5), p99 = percentile(step_seconds, 0.99);
    const double mean = step_seconds.empty()
                            ? 0
                            : std::accumulate(step_seconds.begin(), step_seconds.end(), 0.0) /
                                  static_cast<double>(step_seconds.size());
    const std::string text = vocab->decode(std::vector<std::int32_t>(generated.begin(), generated.end()));
    if (log) {
      std::cerr << "generate: prompt: " << o.prompt << "\n"
                << "generate: continuation: " << text << "\n"
                << "generate: prefill " << prefill_seconds << " s (+ " << tail_seconds << " s for the "
                << S - n_pre << " prompt tokens); per token median " << median * 1e3 << " ms, p99 "
                << p99 * 1e3 << " ms, " << (mean > 0 ? 1.0 / mean : 0.0) << " tokens/s, " << bytes_per_token
                << " bytes/token sent per rank, " << kv_read_per_token << " K/V bytes/token read per rank ("
                << to_string(o.run.dtype) << " cache)\n"
                << "generate: self-check on one rank (" << verify_seconds << " s): K/V of " << checked.size()
                << " recomputed prefill ranges " << checked.dump() << " max rel err " << kv_rel
                << "; logits of " << fed.size() << " decode steps over the whole cache max rel err "
                << max_rel << (verified ? " PASSED" : " FAILED") << "\n";
    }
    std::int64_t kv_bytes = 0;
    const auto e = static_cast<std::int64_t>(dtype_size(o.run.dtype));
    for (const auto& c : caches) kv_bytes += c.local_tokens() * mc.kv_heads * mc.head_dim * 2 * e;
    return json{{"ranks", P},
                {"strategy", to_string(o.run.dist.strategy)},
                {"layout", to_string(o.run.dist.layout)},
                {"context_tokens", n_ctx},
                {"prompt_tokens", prompt_ids.size()},
                {"prefill_tokens", n_pre},
                {"prefill_padded_tokens", S_padded},
                {"prefill_mask", mask_kind},
                {"kv_source", kv_source},
                {"kv_rejected", kv_rejected},
                {"kv_fingerprint", hex64(fingerprint)},
                {"prefill_seconds", prefill_seconds},
                {"prefill_attention_seconds", attention_seconds},
                {"prefill_cache_seconds", cache_seconds},
                {"tail_seconds", tail_seconds},
                {"new_tokens", generated.size()},
                {"seconds_per_token_median", median},
                {"seconds_per_token_p99", p99},
                {"tokens_per_second", mean > 0 ? 1.0 / mean : 0.0},
                {"bytes_per_token", bytes_per_token},
                {"kv_dtype", to_string(o.run.dtype)},
                {"kv_bytes_read_per_token", kv_read_per_token},
                {"kv_bytes_per_rank", comm.all_reduce_max(kv_bytes)},
                {"temperature", o.temperature},
                {"top_k", o.top_k},
                {"seed", o.seed},
                {"prompt", o.prompt},
                {"text", text},
                {"verified", verified},
                {"verify_steps", fed.size()},
                {"verify_max_rel_err", max_rel},
                {"verify_kv_ranges", checked},
                {"verify_kv_max_rel_err", kv_rel},
                {"verify_kv_tolerance", kv_tol},
                {"verify_seconds", verify_seconds}};
  });
}

}  // namespace burst::lm
