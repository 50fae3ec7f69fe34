// tools/cmd_lm.cc — `burst-lm train | eval | generate | info`: the long-context language model on
// the KJV (apps/lm; the token cache comes from build/apps/kjv_prepare). Part of burst-lm only
// (lm_main.cc), built with BURST_WITH_TORCH. Every rank parses the same argv; rank 0 prints
// progress (stderr) and the JSON summary (last stdout line).
#include <dlfcn.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <system_error>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "commands.h"
#include "lm/options.h"

namespace burst::cli {
namespace {

// The BLAS libtorch calls through libblas.so.3 (a Debian alternative: netlib reference BLAS, or
// OpenBLAS from libopenblas0-*): the file the Fortran symbol sgemm_ resolved to in this process
// and, for OpenBLAS, its build line and threading model (`burst-lm info`, the train/eval logs).
nlohmann::json blas_in_use() {
  void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info where{};
  if (sgemm == nullptr || dladdr(sgemm, &where) == 0 || where.dli_fname == nullptr)
    return {{"library", "not loaded (sgemm_ unresolved)"}};
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(where.dli_fname, ec);
  nlohmann::json j = {{"library", ec ? std::string(where.dli_fname) : real.string()}};
  using ConfigFn = const char* (*)();
  using ParallelFn = int (*)();
  if (auto* config = reinterpret_cast<ConfigFn>(dlsym(RTLD_DEFAULT, "openblas_get_config"))) {
    j["name"] = "OpenBLAS";
    j["config"] = config();
    if (auto* parallel = reinterpret_cast<ParallelFn>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"))) {
      const int p = parallel();
      j["threading"] = p == 0 ? "sequential" : p == 1 ? "pthreads" : p == 2 ? "openmp" : "unknown";
    }
  } else {
    j["name"] = real.string().find("/blas/") != std::string::npos ? "reference BLAS (netlib)" : "unknown";
  }
  return j;
}

struct RunArgs {
  std::string data = "data/kjv", strategy = "burst", layout, engine = "dist", dtype = "fp32";
  int threads = 0;
  std::int64_t head_chunk = 2048;
  bool quiet = false;
};

void add_run_options(CLI::App& cmd, RunArgs& a, const std::string& default_layout) {
  a.layout = default_layout;
  cmd.add_option("--data", a.data, "token cache directory (from kjv_prepare)")->capture_default_str();
  cmd.add_option("--strategy", a.strategy,
                 "context-parallel strategy: burst, ring, allgather, ulysses, usp, distflash; tp: train and "
                 "eval run the model under Megatron tensor parallelism (weights sharded, sequence-parallel "
                 "activations; --layout ignored)")
      ->capture_default_str();
  cmd.add_option("--layout", a.layout, "sequence layout: contiguous, zigzag, striped, balanced")
      ->capture_default_str();
  cmd.add_option("--engine", a.engine, "dist (burst's DistAttention) or local (kernel API, 1 rank)")
      ->capture_default_str();
  cmd.add_option("--threads", a.threads, "threads per rank for kernels and torch (0: 2 / ranks, at least 1)");
  cmd.add_option("--head-chunk", a.head_chunk, "rows per chunk of the fused LM head + loss")
      ->capture_default_str();
  cmd.add_flag("--quiet", a.quiet, "no progress lines");
}

// `--dtype` of train and eval (generate: add_generate_dtype_option).
void add_dtype_option(CLI::App& cmd, RunArgs& a) {
  cmd.add_option("--dtype", a.dtype,
                 "fp32, or bf16: attention through burst on bf16 Q, K, V, dO (bf16 O, fp32 lse and "
                 "gradients) and the linear layers in bf16 autocast-style; fp32 master weights, "
                 "optimizer state and checkpoints")
      ->check(CLI::IsMember({"fp32", "f32", "bf16"}))
      ->capture_default_str();
}

lm::RunOptions resolve(const RunArgs& a, const Communicator& comm) {
  lm::RunOptions r;
  r.data_dir = a.data;
  r.tensor_parallel = a.strategy == "tp";
  if (!r.tensor_parallel) r.dist.strategy = strategy_from_string(a.strategy);
  r.dist.layout = layout_from_string(a.layout);
  BURST_CHECK(a.engine == "dist" || a.engine == "local", InvalidArgument, "--engine ", a.engine,
              " is not dist or local");
  r.engine = a.engine == "dist" ? lm::EngineKind::Dist : lm::EngineKind::Local;
  r.dtype = parse_dtype(a.dtype);
  const int threads = a.threads > 0 ? a.threads : std::max(1, 2 / comm.size());
  r.dist.num_threads = threads;
  lm::set_torch_threads(threads);
  r.head_chunk = a.head_chunk;
  r.verbose = !a.quiet;
  r.blas = blas_in_use();
  return r;
}

}  // namespace

void add_lm_commands(CLI::App& app) {
  auto targs = std::make_shared<RunArgs>();
  auto topt = std::make_shared<lm::TrainOptions>();
  auto tout = std::make_shared<std::string>(topt->out_dir.string());
  auto no_resume = std::make_shared<bool>(false);
  auto no_plot = std::make_shared<bool>(false);
  CLI::App* t =
      app.add_subcommand("train", "train the KJV language model with one long context per step (mpirun)");
  add_run_options(*t, *targs, "zigzag");
  add_dtype_option(*t, *targs);
  t->add_option("--out", *tout, "run directory: checkpoint.safetensors, train_log.jsonl, loss.png")
      ->capture_default_str();
  t->add_option("--steps", topt->steps, "total optimizer steps (a resumed run continues to this)")
      ->capture_default_str();
  t->add_option("--seq-len", topt->seq_len, "tokens per step (the whole context, split over ranks)")
      ->capture_default_str();
  t->add_option("--lr", topt->lr, "peak AdamW learning rate")->capture_default_str();
  t->add_option("--warmup", topt->warmup_steps, "linear warm-up steps")->capture_default_str();
  t->add_option("--weight-decay", topt->weight_decay)->capture_default_str();
  t->add_option("--seed", topt->seed, "window-choice seed")->capture_default_str();
  t->add_option("--model-seed", topt->model.seed, "weight-init seed")->capture_default_str();
  t->add_option("--layers", topt->model.layers)->capture_default_str();
  t->add_option("--d-model", topt->model.d_model)->capture_default_str();
  t->add_option("--heads", topt->model.heads, "query heads H")->capture_default_str();
  t->add_option("--kv-heads", topt->model.kv_heads, "key/value heads H_kv (GQA)")->capture_default_str();
  t->add_option("--head-dim", topt->model.head_dim, "D")->capture_default_str();
  t->add_option("--ffn", topt->model.ffn_hidden, "SwiGLU hidden width")->capture_default_str();
  t->add_option("--checkpoint-every", topt->checkpoint_every)->capture_default_str();
  t->add_option("--time-budget", topt->time_budget_seconds,
                "seconds for the training loop: after 3 steps the step count (at most --steps) and the "
                "cosine schedule are set to what fits at the mean step (0: no budget)")
      ->capture_default_str();
  t->add_option("--stop-after", topt->stop_after,
                "return after this many steps (checkpointed; rerun to resume)");
  t->add_flag("--no-resume", *no_resume, "start fresh even if <out>/checkpoint.safetensors exists");
  const std::map<std::string, lm::Recompute> recompute{{"none", lm::Recompute::None},
                                                       {"mlp", lm::Recompute::Mlp},
                                                       {"layer", lm::Recompute::Layer},
                                                       {"seq", lm::Recompute::SeqWise}};
  t->add_option("--recompute", topt->recompute,
                "activation checkpointing: none; mlp (re-run each MLP block in backward); layer (re-run "
                "each layer, attention output and lse cached, BurstEngine's full mode); seq (as layer, "
                "only the later half cached, the first half recomputed; needs --layout striped)")
      ->transform(CLI::CheckedTransformer(recompute))
      ->default_str("none");
  t->add_flag("--no-plot", *no_plot, "skip loss.png");
  topt->plot_python = BURST_PYTHON_EXECUTABLE;
  t->add_option("--plot-python", topt->plot_python, "Python with matplotlib that draws loss.png")
      ->envname("BURST_PYTHON")
      ->capture_default_str();
  t->callback([targs, topt, tout, no_resume, no_plot] {
    const Communicator comm = Communicator::world();
    topt->run = resolve(*targs, comm);
    topt->out_dir = *tout;
    topt->resume = !*no_resume;
    topt->plot = !*no_plot;
    const auto history = lm::run_train(*topt, comm);
    if (comm.rank() == 0 && !history.empty())
      std::printf("%s\n", nlohmann::json{{"steps", history.back().step},
                                         {"loss", history.back().loss},
                                         {"ranks", comm.size()},
                                         {"seq_len", topt->seq_len},
                                         {"heads", topt->model.heads},
                                         {"kv_heads", topt->model.kv_heads},
                                         {"backward_side", history.back().backward_side},
                                         {"strategy", history.back().strategy},
                                         {"bytes_sent_per_step", history.back().bytes_sent},
                                         {"tokens_per_second", history.back().tokens_per_second},
                                         {"peak_rss_bytes", history.back().peak_rss_bytes},
                                         {"dtype", to_string(topt->run.dtype)},
                                         {"blas", topt->run.blas},
                                         {"checkpoint", (topt->out_dir / "checkpoint.safetensors").string()}}
                              .dump()
                              .c_str());
  });

  auto eargs = std::make_shared<RunArgs>();
  auto eopt = std::make_shared<lm::EvalOptions>();
  auto eckpt = std::make_shared<std::string>(eopt->checkpoint.string());
  auto ebooks = std::make_shared<std::string>();
  CLI::App* e =
      app.add_subcommand("eval", "perplexity of a checkpoint on the whole KJV as one sequence (mpirun)");
  add_run_options(*e, *eargs, "balanced");
  add_dtype_option(*e, *eargs);
  e->add_option("--checkpoint", *eckpt)->capture_default_str();
  e->add_option("--max-tokens", eopt->max_tokens, "evaluate only this many leading tokens (0: all)")
      ->capture_default_str();
  e->add_option("--verify-books", eopt->verify_books, "books recomputed on one rank for the self-check")
      ->capture_default_str();
  e->add_option("--per-book-json", *ebooks, "write per-book perplexities here");
  auto esave = std::make_shared<std::string>();
  e->add_option("--save-kv", *esave,
                "directory: each rank writes every layer's K/V of the evaluated tokens there (~0.5 KB per "
                "token per rank at the KJV model's shape) for `burst generate --kv-from`");
  e->callback([eargs, eopt, eckpt, ebooks, esave] {
    const Communicator comm = Communicator::world();
    eopt->run = resolve(*eargs, comm);
    eopt->checkpoint = *eckpt;
    eopt->per_book_json = *ebooks;
    eopt->save_kv = *esave;
    const nlohmann::json summary = lm::run_eval(*eopt, comm);
    if (comm.rank() == 0) std::printf("%s\n", summary.dump().c_str());
    std::fflush(stdout);
  });
  auto gargs = std::make_shared<RunArgs>();
  auto gopt = std::make_shared<lm::GenerateOptions>();
  auto gckpt = std::make_shared<std::string>(gopt->checkpoint.string());
  auto gctx = std::make_shared<std::string>("all");
  CLI::App* g = app.add_subcommand("generate",
                                   "sample from a checkpoint with the whole KJV as context, KV cache "
                                   "sharded over the ranks (mpirun)");
  add_run_options(*g, *gargs, "balanced");  // eval's layout: its --save-kv shards match
  g->add_option("--dtype", gargs->dtype,
                "fp32, or bf16: the KV cache stored in bf16 (half the bytes kept and streamed per token; "
                "decode widens it exactly and accumulates in fp32); the model and the prefill run fp32")
      ->check(CLI::IsMember({"fp32", "f32", "bf16"}))
      ->capture_default_str();
  g->add_option("--checkpoint", *gckpt)->capture_default_str();
  g->add_option("--context", *gctx, "context before the prompt: all (the whole KJV) or its first N tokens")
      ->capture_default_str();
  g->add_option("--prompt", gopt->prompt, "text appended to the context");
  g->add_option("--max-new-tokens", gopt->max_new_tokens)->capture_default_str();
  g->add_option("--temperature", gopt->temperature, "0: greedy")->capture_default_str();
  g->add_option("--top-k", gopt->top_k, "0: whole vocabulary")->capture_default_str();
  g->add_option("--seed", gopt->seed, "sampling seed")->capture_default_str();
  g->add_option("--verify-tokens", gopt->verify_tokens, "first steps recomputed on one rank")
      ->capture_default_str();
  g->add_option("--chunk", gopt->chunk_tokens, "KV-cache chunk tokens (multiple of 64)")
      ->capture_default_str();
  g->add_flag("--prefill-causal", gopt->prefill_causal,
              "prefill with a plain causal mask (default: document-causal over the books, as trained)");
  auto gkv = std::make_shared<std::string>();
  g->add_option(
      "--kv-from", *gkv,
      "the context's K/V from `burst eval --save-kv DIR` (same checkpoint, context, ranks, strategy, "
      "layout, threads) instead of a prefill forward; a directory that does not match is named "
      "and ignored");
  g->callback([gargs, gopt, gckpt, gctx, gkv] {
    const Communicator comm = Communicator::world();
    gopt->run = resolve(*gargs, comm);
    gopt->checkpoint = *gckpt;
    gopt->kv_from = *gkv;
    if (*gctx == "all") {
      gopt->context_tokens = -1;
    } else {
      try {
        gopt->context_tokens = std::stoll(*gctx);
      } catch (const std::exception&) {
        BURST_FAIL(InvalidArgument, "--context '", *gctx, "' is not 'all' or a token count");
      }
    }
    const nlohmann::json summary = lm::run_generate(*gopt, comm);
    if (comm.rank() == 0) std::printf("%s\n", summary.dump().c_str());
    std::fflush(stdout);
  });
  app.add_subcommand("info", "print the libtorch version, the BLAS it calls and burst's kernel ISA as JSON")
      ->callback([] {
        if (Communicator::world().rank() == 0)
          std::printf("%s\n", nlohmann::json{{"torch", lm::torch_version()},
                                             {"blas", blas_in_use()},
                                             {"isa", to_string(detect_isa())}}
                                  .dump()
                                  .c_str());
      });
}

}  // namespace burst::cli
