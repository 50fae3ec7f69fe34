// apps/lm/train.h — `burst train`: the long-context training loop and `burst eval`.
//
// Training: one window of seq_len tokens of the KJV per step (seeded choice), split across the
// ranks by burst's layout, document-causal mask over the books inside the window; AdamW with
// warm-up + cosine decay and global-norm clipping; weight gradients all-reduced (sum) over the
// ranks, so every rank holds identical weights (under tensor parallelism, model_tp.h, each rank
// holds its shards and only the replicated weights' gradients are summed). Rank 0 writes the checkpoint, a
// JSON-lines log and a loss-curve PNG. A run resumes from <out>/checkpoint.safetensors without losing steps
// and ends bitwise equal to an uninterrupted run: window choice depends only on (seed, step), and the
// checkpoint holds the weights, AdamW's moments and step count, the history and the time budget's
// fitted step count (tests/multinode_faults.sh resume kills a rank mid-run to show it).
// Evaluation: the whole KJV as ONE sequence (document-causal over its 66 books), balanced
// layout; perplexity overall and per book, with a single-rank self-check on sampled books.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "burst/comm.h"
#include "burst/strategy.h"
#include "checkpoint.h"
#include "data.h"
#include "model.h"

namespace burst::lm {

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
  Model::Recompute recompute = Model::Recompute::None;  ///< activation checkpointing (Model::set_recompute)
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

/// Loads a `burst train` checkpoint and checks that it was trained on `corpus` (read from
/// data_dir). Throws Error(InvalidArgument) for a corrupt file, another kind of checkpoint or a
/// different token cache (the message names both checksums). Not collective.
Checkpoint load_lm_checkpoint(const std::filesystem::path& path, const Corpus& corpus,
                              const std::filesystem::path& data_dir);
/// The model the checkpoint describes, with its weights. Throws as checkpoint_tensor.
Model model_from_checkpoint(const Checkpoint& ckpt);

}  // namespace burst::lm
