// apps/lm/model_tp.h — the decoder of model.h under Megatron-LM tensor parallelism with sequence
// parallelism (`burst train|eval --strategy tp`).
//
// Owns: which parameter is split how (Shoeybi et al. 2019, arXiv 1909.08053 §3: wq, wk, wv and
// the SwiGLU w1, w3 column-parallel — rows of the [out, in] matrices, i.e. whole heads and 1/P of
// the hidden units; wo and w2 row-parallel — columns), slicing a model into one rank's shards and
// gathering them back (checkpoints hold full tensors), the tensor-parallel forward, and the
// gradient reduction (only replicated parameters are all-reduced).
// Activations between the blocks are sequence-parallel (Korthikanti et al. 2022, arXiv
// 2205.05198 §4.2): the residual stream X [S/P, d] of a rank is its contiguous slice; RMSNorm and
// the residual adds run on it; an all-gather builds [S, d] before each column-parallel GEMM and a
// reduce-scatter returns [S/P, d] after each row-parallel one — per layer and pass 2 all-gathers
// and 2 reduce-scatters of S·d floats.
// Replicated: the norms (d floats each, as in Megatron-SP) and the token embedding and LM head.
// Megatron splits the last two over the vocabulary; here V·d is small next to S·d (V = 2048,
// d = 128 against S ≥ 16K), and a vocabulary-parallel head would add an all-gather of the final
// [S, d] and a reduce-scatter of its gradient per step (≈ 2·S·d floats) to save the all-reduce of
// the embedding and head gradients (≈ 4·V·d floats): replicated, they move fewer bytes.
// Attention: burst's single-process kernel over the whole sequence for this rank's H/P heads
// (TpEngine), with the model's mask. docs/strategies.md § Megatron tensor parallelism in the LM.
#pragma once

#include "torch_api.h"

#include <cstdint>
#include <string>

#include "burst/comm.h"
#include "model.h"
#include "tp_comm.h"
#include "train.h"

namespace burst::lm {

/// How tensor parallelism splits a parameter [out, in]: Replicated; Rows (column-parallel
/// linear: output features, rank r keeps rows [r·out/P, (r+1)·out/P)); Columns (row-parallel
/// linear: input features).
enum class TpSplit : std::uint8_t { Replicated, Rows, Columns };

/// The split of the parameter called `name` (Model::names(): "embed", "layer0.wq", ...).
TpSplit tp_split(const std::string& name);

/// True when `run` asks for tensor parallelism of the model: --strategy tp
/// (RunOptions::tensor_parallel) with the dist engine.
bool tensor_parallel(const RunOptions& run);

/// Throws Error(InvalidArgument) unless heads, kv_heads and ffn_hidden are multiples of P (whole
/// heads and equal hidden slices per rank). Depends only on its arguments: identical verdict on
/// every rank.
void validate_tp(const ModelConfig& cfg, int P);

/// Rank `rank`'s slice of `full` (a new tensor, no autograd history) under `split`.
torch::Tensor tp_shard(const torch::Tensor& full, TpSplit split, int rank, int P);

/// The full tensor from every rank's `shard` (rank order); Replicated returns shard.
/// Collective over comm (same split and shapes on every rank); counted on comm's counters.
torch::Tensor tp_unshard(const Communicator& comm, const torch::Tensor& shard, TpSplit split);

/// Replaces the split parameters of `model` by this rank's slices (leaf tensors that require
/// grad). Throws as validate_tp. Not collective.
void shard_model(Model& model, int rank, int P);

/// Hidden states [S_local, d] of this rank's tokens [S_local] (engine.positions()) under tensor
/// parallelism; `model` holds this rank's shards (shard_model). Per layer: RMSNorm on the shard,
/// all-gather, QKV (H/P heads) with RoPE on global positions, attention over the whole sequence
/// (engine), output projection, reduce-scatter, residual; RMSNorm, all-gather, SwiGLU (F/P),
/// down projection, reduce-scatter, residual. Autograd through everything (backward: the
/// collectives swapped); runs without autograd state under InferenceMode/NoGradGuard.
/// Dtypes as Model::forward: the GEMMs in model.compute_dtype() (bf16: the normed rows are all-
/// gathered in bf16, the row-parallel partial sums reduce-scattered in fp32), attention in the
/// engine's dtype, RMSNorm, RoPE and the residual stream fp32.
/// Collective over the engine's ranks. `on_stage` as Model::forward.
torch::Tensor forward_tp(Model& model, const torch::Tensor& tokens, TpEngine& engine,
                         const Model::StageHook& on_stage = {});

/// After backward: all-reduces (sums) the gradients of the replicated parameters over comm (one
/// flat fp32 buffer, as the other strategies' whole-model all-reduce) and returns the global
/// gradient norm — replicated gradients counted once, split ones summed over ranks in fp64 —
/// and this rank's bytes sent for it. Split parameters' gradients are complete on their rank
/// (their inputs were all-gathered): no reduction. Collective over comm.
struct TpGradients {
  double norm = 0;
  std::int64_t bytes_sent = 0;
};
TpGradients reduce_gradients_tp(Model& model, const Communicator& comm);

}  // namespace burst::lm
