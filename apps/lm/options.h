// apps/lm/options.h — what a caller of the language model names without libtorch: the model's
// architecture (ModelConfig), activation checkpointing (Recompute), the options of train, eval
// and generate, and their entry points (defined in train.cc, eval.cc, generate.cc). `burst-lm`'s
// command line (tools/cmd_lm.cc) includes only this, so it compiles without libtorch's headers
// (the heaviest unit of the main job's build otherwise); the model itself is model.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "burst/comm.h"
#include "burst/strategy.h"

namespace burst::lm {

struct ModelConfig {
  int vocab_size = 2048;
  int d_model = 128;
  int layers = 2;
  int heads = 4;  ///< H
  /// H_kv (GQA: H % H_kv == 0). Multi-head by default: with H_kv = H the GQA rule
  /// (choose_backward_side) picks BurstAttention's query-side backward (docs/strategies.md).
  int kv_heads = 4;
  int head_dim = 16;     ///< D
  int ffn_hidden = 256;  ///< SwiGLU width
  double rope_base = 10000.0;
  double norm_eps = 1e-5;
  std::uint64_t seed = 1234;

  /// Throws Error(InvalidArgument) naming the bad field.
  void validate() const;
  std::int64_t num_parameters() const;
  nlohmann::json to_json() const;
  static ModelConfig from_json(const nlohmann::json& j);
};

/// Activation checkpointing on the rank's slice of the sequence (training only; no effect
/// under NoGradGuard). Gradients are identical to Recompute::None (same operations, same order).
/// - Mlp (selective recomputation, Korthikanti et al. 2022): each layer's MLP block (RMSNorm →
///   SwiGLU → residual) keeps only its input [S_local, d] and is re-run in backward; the
///   attention block is never recomputed.
/// - Layer (BurstEngine's sequence-level checkpointing in "full" mode, docs/algorithm.md §9.1):
///   each layer keeps only its input, the attention output O [S_local, H·D] and lse; backward
///   re-runs the layer with the attention forward replayed from that cache (no attention FLOPs,
///   no messages) — the collective attention backward still runs exactly once per layer.
/// - SeqWise (BurstEngine's "seq-wise" mode, §9.1): as Layer, but only the later half of each
///   rank's O and lse is kept; backward recomputes the first half with engine.first_half()
///   (¼ of a causal forward's FLOPs, half its ring traffic). Needs an engine built with
///   make_engine(..., seq_wise = true) (striped layout, causal-type mask).
enum class Recompute { None, Mlp, Layer, SeqWise };

/// Which attention engine runs the sequence: burst's DistAttention (any P) or the local kernel
/// (P = 1 only; the oracle path).
enum class EngineKind : std::uint8_t { Dist, Local };

struct RunOptions {
  std::filesystem::path data_dir = "data/kjv";
  DistConfig dist;  ///< strategy, layout, threads
  EngineKind engine = EngineKind::Dist;
  /// `--strategy tp`: the model runs under Megatron tensor parallelism with sequence parallelism
  /// (model_tp.h; train and eval, with the dist engine); `dist.strategy` is then unused.
  bool tensor_parallel = false;
  std::int64_t head_chunk = 2048;  ///< rows per chunk of the fused LM head + loss
  /// Compute dtype (`--dtype`): F32, or BF16 — attention through burst on bf16 Q, K, V, dO (bf16
  /// O, fp32 lse and gradients) and the linear layers autocast-style (Model::set_compute_dtype),
  /// with fp32 master weights, optimizer state and checkpoints. docs/design.md § The language model in bf16.
  DType dtype = DType::F32;
  bool verbose = true;  ///< progress on rank 0's stderr
  /// The BLAS libtorch calls (`burst info`'s "blas" object), named in the logs and summaries.
  nlohmann::json blas = nlohmann::json::object();
};

/// One line naming the BLAS in `blas` ("OpenBLAS 0.3.21 ... (openmp) at /usr/lib/..."), for logs.
std::string blas_summary(const nlohmann::json& blas);

struct TrainOptions {
  RunOptions run;
  std::filesystem::path out_dir = "runs/kjv";
  ModelConfig model;  ///< vocab_size is taken from the data
  int steps = 40;
  std::int64_t seq_len = 16384;  ///< tokens per step (the whole context, all ranks)
  double lr = 3e-3, warmup_steps = 4, min_lr_ratio = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1, grad_clip = 1.0;
  std::uint64_t seed = 1234;  ///< window choice (the model has its own seed)
  int checkpoint_every = 10;
  bool resume = true;              ///< continue from <out_dir>/checkpoint.safetensors if present
  int stop_after = 0;              ///< > 0: return after this many steps of this invocation
                                   ///< (checkpointed; a later run resumes), e.g. time slices
  double time_budget_seconds = 0;  ///< > 0: fit the step count (and the cosine schedule) to
                                   ///< this wall time of the training loop (run_train)
  bool plot = true;
  std::string plot_python = "python3";    ///< Python with matplotlib that draws loss.png (the CLI
                                          ///< passes --plot-python / BURST_PYTHON / the configured one)
  Recompute recompute = Recompute::None;  ///< activation checkpointing (Model::set_recompute)
};

struct StepRecord {
  int step = 0;
  double loss = 0, seconds = 0, tokens_per_second = 0, attention_share = 0, lr = 0;
  std::int64_t window_begin = 0, bytes_sent = 0;
  std::string backward_side;        ///< EngineTotals::backward_side of the step
  std::string strategy;             ///< "tp" for tensor parallelism, else the attention strategy
  std::int64_t peak_rss_bytes = 0;  ///< peak resident set so far, max over ranks
  /// Dtype of the q, k, v, dO every attention pass of the step received (EngineTotals): "bf16" or
  /// "f32" ("mixed" would be a bug).
  std::string attention_dtype;
  nlohmann::json to_json() const;
};

/// Runs training; returns the records of every step so far (resumed ones included).
/// Collective over comm. Throws Error(InvalidArgument) on bad options, a missing/corrupt cache,
/// or a checkpoint that does not match (all ranks, before the first step).
std::vector<StepRecord> run_train(const TrainOptions& opts, const Communicator& comm);

struct EvalOptions {
  RunOptions run;
  std::filesystem::path checkpoint = "runs/kjv/checkpoint.safetensors";
  std::int64_t max_tokens = 0;  ///< 0: the whole KJV; else its first max_tokens tokens
  int verify_books = 4;         ///< books recomputed on a single rank for the self-check
  double verify_rtol = 1e-5;
  std::filesystem::path per_book_json;  ///< optional: per-book perplexities written here
  /// optional (`--save-kv`): each rank writes every layer's K/V of the evaluated tokens here
  /// (kv_dump.h: ~0.5 KB per token per rank at the KJV model's shape), for `burst generate
  /// --kv-from`. Context-parallel strategies only.
  std::filesystem::path save_kv;
};

/// Evaluates and returns the summary object (the last line `burst eval` prints). Collective.
nlohmann::json run_eval(const EvalOptions& opts, const Communicator& comm);

/// `burst generate`: generate.h describes the prefill, the K/V reuse and the decode.
struct GenerateOptions {
  RunOptions run;
  std::filesystem::path checkpoint = "runs/kjv/checkpoint.safetensors";
  std::int64_t context_tokens = -1;  ///< −1: the whole KJV ("all"); else its first n tokens
  std::string prompt;
  int max_new_tokens = 32;
  double temperature = 0.8;  ///< 0: greedy
  int top_k = 40;            ///< 0: the whole vocabulary
  std::uint64_t seed = 1;
  int verify_tokens = 2;  ///< decode steps recomputed on one rank (0: none)
  double verify_rtol = 1e-5;
  std::int64_t verify_kv_tokens = 8192;  ///< tokens per prefill range recomputed on one rank
  std::int64_t chunk_tokens = 1024;      ///< KV-cache chunk (flash-decoding split)
  bool prefill_causal = false;           ///< plain causal prefill instead of document-causal
  /// `burst eval --save-kv` directory: the context's K/V loaded from it when every rank's shard
  /// matches this run (kv_dump.h); else (or empty) prefilled by a forward. The summary's
  /// kv_source says which ("eval" or "prefill"), kv_rejected why not.
  std::filesystem::path kv_from;
};

/// Generates; rank 0 prints the text and progress on stderr. Returns the summary (the JSON line
/// `burst generate` prints): tokens, timings, bytes per token, verified. Collective.
/// Throws Error(InvalidArgument) (every rank, before any payload) for a missing cache or
/// checkpoint, a checkpoint of other data, or bad options.
nlohmann::json run_generate(const GenerateOptions& opts, const Communicator& comm);

/// Sets libtorch's intra-op threads (torch::set_num_threads) of this process.
void set_torch_threads(int threads);
/// The libtorch version this program was built against (TORCH_VERSION), e.g. "2.1.2".
std::string torch_version();

}  // namespace burst::lm
