// apps/lm/eval.cc — `burst eval`: the whole KJV as one sequence, split across the ranks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "burst/error.h"
#include "checkpoint.h"
#include "data.h"
#include "engine_factory.h"
#include "fused_head_loss.h"
#include "kv_dump.h"
#include "model_tp.h"
#include "progress.h"
#include "runtime.h"
#include "train.h"

namespace burst::lm {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct BookRange {
  std::int64_t begin = 0, end = 0;  // clipped to the evaluated prefix
};

/// Per-book (loss sum, target count) of `positions` given their per-token losses.
void accumulate_books(const Corpus& corpus, const std::vector<std::int64_t>& positions,
                      const torch::Tensor& losses, const std::vector<float>& weights,
                      std::vector<double>& sums, std::vector<double>& counts) {
  const float* l = losses.data_ptr<float>();
  for (std::size_t i = 0; i < positions.size(); ++i) {
    if (weights[i] == 0.0f) continue;
    const auto b = static_cast<std::size_t>(corpus.book_of(positions[i]));
    sums[b] += static_cast<double>(l[i]);
    counts[b] += 1.0;
  }
}

/// Mean loss of one book computed on this rank alone (LocalEngine over the book's positions,
/// same mask, same global positions): the oracle of the self-check.
double single_rank_book_loss_sum(Model& model, const Corpus& corpus, const Window& w, const BookRange& r,
                                 const RunOptions& run) {
  std::vector<std::int64_t> pos;
  for (std::int64_t p = r.begin; p < r.end; ++p) pos.push_back(p);
  LocalEngine engine(pos, w.mask, w.S_padded, run.dist.num_threads, KernelImpl::Tiled, run.dtype);
  std::vector<std::int64_t> in, tg;
  std::vector<float> wt;
  gather_window(corpus, w, pos, in, tg, wt);
  const auto n = static_cast<std::int64_t>(in.size());
  const auto hidden = model.forward(torch::from_blob(in.data(), {n}, torch::kInt64), engine);
  const auto losses = head_token_losses(hidden, model.head(), torch::from_blob(tg.data(), {n}, torch::kInt64),
                                        run.head_chunk);
  return (losses.to(torch::kFloat64) * torch::from_blob(wt.data(), {n}).to(torch::kFloat64))
      .sum()
      .item<double>();
}

/// The phases of one evaluation forward on S_local tokens, in Model::Stage order (3 per layer),
/// then the LM head; work in flop: projections 2·S·d·(H·D + 2·H_kv·D), attention 4·D·H·pairs,
/// output projection + SwiGLU 2·S·(H·D·d + 3·d·F), head 2·S·V·d.
std::vector<Progress::Phase> eval_phases(const ModelConfig& m, std::int64_t S_local, std::int64_t pairs) {
  const double S = static_cast<double>(S_local), d = m.d_model, H = m.heads, D = m.head_dim;
  std::vector<Progress::Phase> out;
  for (int l = 0; l < m.layers; ++l) {
    const std::string layer = "layer " + std::to_string(l + 1) + "/" + std::to_string(m.layers) + " ";
    out.push_back({layer + "projections", "dense", 2 * S * d * (H * D + 2.0 * m.kv_heads * D)});
    out.push_back({layer + "attention", "attention", 4 * D * H * static_cast<double>(pairs)});
    out.push_back({layer + "MLP", "dense", 2 * S * (H * D * d + 3 * d * m.ffn_hidden)});
  }
  out.push_back({"LM head", "dense", 2 * S * m.vocab_size * d});
  return out;
}

/// Forward attention flop/s of this rank's kernel on a short causal sequence (4096 tokens, the
/// model's H, H_kv, D; ~0.1 s): the progress ETA's rate for attention until a layer's attention
/// has finished. Not collective.
double attention_rate(const ModelConfig& m, int threads) {
  const std::int64_t S = 4096;
  std::vector<std::int64_t> pos(static_cast<std::size_t>(S));
  for (std::int64_t i = 0; i < S; ++i) pos[static_cast<std::size_t>(i)] = i;
  LocalEngine engine(pos, Mask::causal_mask(), S, threads);
  const auto q = torch::randn({1, S, m.heads, m.head_dim}), k = torch::randn({1, S, m.kv_heads, m.head_dim}),
             v = torch::randn({1, S, m.kv_heads, m.head_dim}), out = torch::empty_like(q),
             lse = torch::empty({1, m.heads, S});
  const auto view = [](const torch::Tensor& t) { return make_view(t.data_ptr<float>(), t.sizes().vec()); };
  const Stopwatch sw;
  engine.forward(view(q), view(k), view(v), view(out), view(lse));
  return 4.0 * m.head_dim * m.heads * static_cast<double>(engine.totals().forward_pairs) /
         std::max(sw.seconds(), 1e-9);
}

/// One value per rank, gathered on every rank (fp64-exact for integers below 2⁴⁸). Collective.
std::vector<std::int64_t> per_rank(const Communicator& comm, double value) {
  std::vector<double> v(static_cast<std::size_t>(comm.size()), 0.0);
  v[static_cast<std::size_t>(comm.rank())] = value;
  all_reduce_sum_f64(comm, v);
  return std::vector<std::int64_t>(v.begin(), v.end());
}

}  // namespace

json run_eval(const EvalOptions& o, const Communicator& comm) {
  const int P = comm.size(), rank = comm.rank();
  const bool log = o.run.verbose && rank == 0;
  Corpus corpus;
  Checkpoint ckpt;
  comm.agree_on([&] {
    corpus = load_corpus(o.run.data_dir);
    ckpt = load_lm_checkpoint(o.checkpoint, corpus, o.run.data_dir);
    BURST_CHECK(o.max_tokens >= 0 && o.verify_books >= 0, InvalidArgument, "max_tokens=", o.max_tokens,
                " and verify_books=", o.verify_books, " must be >= 0");
    BURST_CHECK(o.save_kv.empty() || !tensor_parallel(o.run), InvalidArgument,
                "eval --save-kv keeps the K/V of a context-parallel run; tensor parallelism shards heads");
  });
  Model model = model_from_checkpoint(ckpt);
  model.set_compute_dtype(to_torch(o.run.dtype));  // fp32 weights, bf16 GEMMs with --dtype bf16
  const ModelConfig& mcfg = model.config();
  // Tensor parallelism: this rank's shards of the checkpoint's full weights run the evaluation;
  // the full model stays for the single-rank self-check.
  const bool tp = tensor_parallel(o.run);
  std::optional<Model> shards;
  if (tp) {
    shards.emplace(model);
    shard_model(*shards, rank, P);
  }
  // No autograd state from here on: no graph, no version counters, no saved tensors
  // (c10::InferenceMode; the model's parameters were made before it, as normal tensors).
  const c10::InferenceMode inference;

  const std::int64_t N = o.max_tokens > 0 ? std::min(o.max_tokens, corpus.num_tokens()) : corpus.num_tokens();
  const std::int64_t S_padded = padded_length(N, P);
  const Window w = make_window(corpus, 0, N, S_padded);
  if (log)
    // The padding tail (S_padded > N) is a segment of its own in cu_seqlens so that no real
    // token attends to it; it is not a book.
    std::cerr << "eval: " << N << " tokens as one sequence ("
              << w.cu_seqlens.size() - 1 - (S_padded > N ? 1 : 0) << " books, document-causal, "
              << S_padded - N << " padding tokens), " << P << " ranks, "
              << (tp ? std::string("tp (Megatron tensor parallelism) / contiguous")
                     : std::string(to_string(o.run.dist.strategy)) + " / " + to_string(o.run.dist.layout))
              << ", model step " << ckpt.header.at("step") << ", dtype " << to_string(o.run.dtype)
              << ", BLAS " << blas_summary(o.run.blas) << "\n";

  return abort_on_failure(comm, "burst eval", [&]() -> json {
    const Stopwatch sw;
    std::unique_ptr<AttentionEngine> engine;
    if (tp)
      engine = std::make_unique<TpEngine>(comm, S_padded, w.mask, o.run.dist.num_threads, o.run.dtype);
    else
      engine = make_engine(o.run, comm, mcfg, S_padded, w.mask);
    std::vector<std::int64_t> in, tg;
    std::vector<float> wt;
    gather_window(corpus, w, engine->positions(), in, tg, wt);
    const auto n_local = static_cast<std::int64_t>(in.size());
    Progress progress("eval: ", eval_phases(mcfg, n_local, engine->planned_forward_pairs()), log);
    if (log) progress.set_prior_rate("attention", attention_rate(mcfg, o.run.dist.num_threads));
    const Model::StageHook on_stage = [&](int layer, Model::Stage st) {
      // phase 3·layer + stage; Done (layer = L) is the LM head, 3·L
      progress.begin(
          static_cast<std::size_t>(st == Model::Stage::Done ? 3 * layer : 3 * layer + static_cast<int>(st)));
    };
    const auto tokens = torch::from_blob(in.data(), {n_local}, torch::kInt64);
    // --save-kv: every layer's K/V of the real tokens kept as they pass (burst generate --kv-from
    // reuses them instead of recomputing this forward; kv_dump.h).
    std::optional<KvCaptureEngine> capture;
    if (!o.save_kv.empty()) capture.emplace(*engine, N, mcfg.layers, false);
    AttentionEngine& attention = capture ? static_cast<AttentionEngine&>(*capture) : *engine;
    const auto hidden = tp ? forward_tp(*shards, tokens, static_cast<TpEngine&>(*engine), on_stage)
                           : model.forward(tokens, attention, on_stage);
    const auto losses = head_token_losses(
        hidden, model.head(), torch::from_blob(tg.data(), {n_local}, torch::kInt64), o.run.head_chunk);
    progress.end();
    double save_kv_seconds = 0;
    if (capture) {
      const Stopwatch save_sw;
      save_kv_shard(kv_shard_path(o.save_kv, rank, P),
                    kv_shard_key(model, corpus, N, S_padded, "causal_document", o.run, rank, P),
                    capture->shard());
      capture.reset();  // frees the copy before the self-check
      save_kv_seconds = comm.all_reduce_max(save_sw.seconds());
      if (log)
        std::cerr << "eval: K/V of every layer saved to " << o.save_kv.string() << " in " << save_kv_seconds
                  << " s\n";
    }
    const auto nb = static_cast<std::size_t>(corpus.num_books());
    std::vector<double> sums(nb, 0.0), counts(nb, 0.0);
    // Positions past N are padding (weight 0); clamp for book_of.
    std::vector<std::int64_t> real_pos(engine->positions());
    for (auto& p : real_pos) p = std::min(p, N - 1);
    accumulate_books(corpus, real_pos, losses, wt, sums, counts);
    std::vector<double> touched(nb, 0.0);  // ranks holding tokens of each book
    for (std::size_t i = 0; i < real_pos.size(); ++i)
      if (engine->positions()[i] < N) touched[static_cast<std::size_t>(corpus.book_of(real_pos[i]))] = 1.0;
    all_reduce_sum_f64(comm, sums);
    all_reduce_sum_f64(comm, counts);
    all_reduce_sum_f64(comm, touched);
    const double seconds = comm.all_reduce_max(sw.seconds());
    double loss_total = 0, count_total = 0;
    for (std::size_t b = 0; b < nb; ++b) {
      loss_total += sums[b];
      count_total += counts[b];
    }
    const double ppl = std::exp(loss_total / count_total);

    // Attention rate: forward FLOP = 4·D·H·(visible pairs), summed over ranks and layers, over
    // the slowest rank's attention time.
    const EngineTotals t = engine->totals();
    std::vector<double> flop{4.0 * mcfg.head_dim * mcfg.heads * static_cast<double>(t.forward_pairs)};
    all_reduce_sum_f64(comm, flop);
    const double attn_seconds = comm.all_reduce_max(t.forward_seconds);
    const std::vector<std::int64_t> bytes = per_rank(comm, static_cast<double>(t.bytes_sent));

    // Self-check: sampled books recomputed on single ranks (round-robin) must match.
    std::vector<BookRange> ranges(nb);
    for (std::size_t b = 0; b < nb; ++b)
      ranges[b] = {std::min(corpus.book_offsets[b], N), std::min(corpus.book_offsets[b + 1], N)};
    std::vector<std::size_t> sample;
    {
      std::vector<std::size_t> small, straddling;
      for (std::size_t b = 0; b < nb; ++b) {
        const auto len = ranges[b].end - ranges[b].begin;
        if (len < 2) continue;
        if (touched[b] > 1.5)
          straddling.push_back(b);
        else if (len <= 20000)
          small.push_back(b);
      }
      std::sort(straddling.begin(), straddling.end(), [&](std::size_t a, std::size_t c) {
        return ranges[a].end - ranges[a].begin < ranges[c].end - ranges[c].begin;
      });
      if (o.verify_books > 0 && !straddling.empty()) sample.push_back(straddling.front());  // crosses ranks
      for (std::uint64_t i = 0; sample.size() < static_cast<std::size_t>(o.verify_books) && !small.empty();
           ++i) {
        const std::size_t k = static_cast<std::size_t>(splitmix64(mcfg.seed + i) % small.size());
        sample.push_back(small[k]);
        small.erase(small.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
    std::vector<double> ref(sample.size(), 0.0);
    const Stopwatch verify_sw;
    {
      // Rank 0's share of the self-check: one phase per book it recomputes.
      std::vector<Progress::Phase> phases;
      for (std::size_t j = 0; j < sample.size(); j += static_cast<std::size_t>(P)) {
        const auto n = ranges[sample[j]].end - ranges[sample[j]].begin;
        double work = 0;
        for (const auto& ph : eval_phases(mcfg, n, n * (n + 1) / 2)) work += ph.work;
        phases.push_back({"self-check on book " + corpus.book_names[sample[j]], "self-check", work});
      }
      std::size_t next = 3 * static_cast<std::size_t>(mcfg.layers) + 1;
      progress.add(phases);
      for (std::size_t j = 0; j < sample.size(); ++j) {
        if (static_cast<int>(j % static_cast<std::size_t>(P)) != rank) continue;
        if (rank == 0) progress.begin(next++);
        ref[j] = single_rank_book_loss_sum(model, corpus, w, ranges[sample[j]], o.run);
      }
      progress.end();
    }
    all_reduce_sum_f64(comm, ref);
    double max_rel = 0;
    json verify_rows = json::array();
    for (std::size_t j = 0; j < sample.size(); ++j) {
      const std::size_t b = sample[j];
      const double rel = std::abs(ref[j] - sums[b]) / std::max(std::abs(ref[j]), 1e-30);
      max_rel = std::max(max_rel, rel);
      verify_rows.push_back({{"book", corpus.book_names[b]},
                             {"tokens", ranges[b].end - ranges[b].begin},
                             {"distributed_loss", sums[b] / counts[b]},
                             {"single_rank_loss", ref[j] / counts[b]},
                             {"rel_err", rel},
                             {"ranks_holding", static_cast<int>(touched[b])}});
    }
    const bool verified = !sample.empty() && max_rel <= o.verify_rtol;

    const std::vector<std::int64_t> rss_all = per_rank(comm, static_cast<double>(peak_rss_bytes()));
    json per_book = json::array();
    for (std::size_t b = 0; b < nb; ++b)
      if (counts[b] > 0)
        per_book.push_back({{"book", corpus.book_names[b]},
                            {"tokens", ranges[b].end - ranges[b].begin},
                            {"loss", sums[b] / counts[b]},
                            {"perplexity", std::exp(sums[b] / counts[b])}});
    if (rank == 0 && !o.per_book_json.empty()) {
      if (o.per_book_json.has_parent_path()) fs::create_directories(o.per_book_json.parent_path());
      std::ofstream(o.per_book_json) << json{{"per_book", per_book}, {"verification", verify_rows}}.dump(1)
                                     << "\n";
    }
    if (log) {
      std::cerr << "eval: per-book perplexity (" << per_book.size() << " books):\n";
      for (std::size_t i = 0; i < per_book.size(); ++i) {
        char cell[64];
        std::snprintf(cell, sizeof cell, "  %-6s %7lld tok %8.2f",
                      per_book[i]["book"].get<std::string>().c_str(),
                      static_cast<long long>(per_book[i]["tokens"].get<std::int64_t>()),
                      per_book[i]["perplexity"].get<double>());
        std::cerr << cell << ((i % 3 == 2) ? "\n" : "");
      }
      std::cerr << "\neval: self-check against single-rank recomputation (rtol " << o.verify_rtol << "):\n";
      for (const auto& r : verify_rows)
        std::cerr << "  " << r["book"].get<std::string>() << " (" << r["tokens"] << " tokens, on "
                  << r["ranks_holding"] << " rank(s)): distributed " << r["distributed_loss"].get<double>()
                  << " single-rank " << r["single_rank_loss"].get<double>() << " rel err "
                  << r["rel_err"].get<double>() << "\n";
      std::cerr << "eval: self-check " << (verified ? "PASSED" : "FAILED") << " in " << verify_sw.seconds()
                << " s\n";
    }
    const auto max_rss = *std::max_element(rss_all.begin(), rss_all.end());
    const auto max_bytes = *std::max_element(bytes.begin(), bytes.end());
    return {{"tokens", N},
            {"ranks", P},
            {"context_length", N},
            {"strategy", tp ? std::string("tp") : to_string(o.run.dist.strategy)},
            {"layout", tp ? std::string("contiguous") : to_string(o.run.dist.layout)},
            {"dtype", to_string(o.run.dtype)},
            {"attention_dtype", t.bf16_passes == 0          ? "f32"
                                : t.bf16_passes == t.passes ? "bf16"
                                                            : "mixed"},
            {"checkpoint_step", ckpt.header.at("step")},
            {"loss", loss_total / count_total},
            {"perplexity", ppl},
            {"unigram_perplexity", unigram_perplexity(corpus)},
            {"seconds", seconds},
            {"attention_seconds", attn_seconds},
            {"attention_gflop", flop[0] / 1e9},
            {"attention_gflops", attn_seconds > 0 ? flop[0] / attn_seconds / 1e9 : 0.0},
            {"bytes_sent", max_bytes},
            {"bytes_sent_per_rank", bytes},
            {"peak_rss_bytes", max_rss},
            {"peak_rss_bytes_per_rank", rss_all},
            {"verified", verified},
            {"verify_max_rel_err", max_rel},
            {"verify_books", verify_rows.size()},
            {"blas", o.run.blas},
            {"saved_kv", o.save_kv.string()},
            {"save_kv_seconds", save_kv_seconds},
            {"inference_mode", true}};
  });
}

Checkpoint load_lm_checkpoint(const fs::path& path, const Corpus& corpus, const fs::path& data_dir) {
  Checkpoint ckpt = load_checkpoint(path);
  BURST_CHECK(ckpt.header.value("kind", "") == "burst-lm", InvalidArgument, path.string(),
              " is not a burst LM checkpoint");
  const auto want = ckpt.header.at("run").at("data_checksum").get<std::string>();
  char have[17];
  std::snprintf(have, sizeof have, "%016llx", static_cast<unsigned long long>(corpus.checksum));
  BURST_CHECK(want == have, InvalidArgument, "checkpoint ", path.string(), " was trained on token cache ",
              want, ", but ", data_dir.string(), " holds ", have,
              " (different vocabulary or data): use the matching --data directory");
  return ckpt;
}

Model model_from_checkpoint(const Checkpoint& ckpt) {
  Model model(ModelConfig::from_json(ckpt.header.at("model")));
  for (std::size_t i = 0; i < model.parameters().size(); ++i)
    model.parameters()[i].detach().copy_(
        checkpoint_tensor(ckpt, model.names()[i], model.parameters()[i].sizes().vec()));
  return model;
}

}  // namespace burst::lm
