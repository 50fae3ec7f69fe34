// apps/lm/tp_comm.h — the communication of Megatron-style tensor parallelism with sequence
// parallelism (Shoeybi et al. 2019, arXiv 1909.08053 §3; Korthikanti et al. 2022, arXiv
// 2205.05198 §4.2) on torch tensors, and the attention engine of a tensor-parallel rank.
//
// Owns: TpEngine — the sequence shard of this rank (contiguous rows [r·S/P, (r+1)·S/P) of the
// residual stream, where the norms and residual adds run), the two sequence-parallel collectives
// (all-gather of rows before a column-parallel GEMM, reduce-scatter of partial sums after a
// row-parallel GEMM) with their byte counts, and the attention of this rank's H/P heads over the
// whole sequence (burst's single-process kernel, LocalEngine); sp_all_gather / sp_reduce_scatter,
// the autograd functions that pair them (each one's backward is the other, 2205.05198 Fig. 5).
// Does not: own weights (model_tp.h) or split heads (the caller passes H/P-head tensors).
#pragma once

#include "torch_api.h"

#include <cstdint>
#include <vector>

#include "attention_fn.h"
#include "burst/comm.h"
#include "burst/mask.h"

namespace burst::lm {

/// One training step's (or evaluation's) tensor-parallel group over `comm` for a sequence of
/// S_global tokens under `mask`.
/// - positions(): this rank's residual-stream rows, contiguous [r·S_global/P, (r+1)·S_global/P),
///   so that an all-gather in rank order is the sequence in position order.
/// - forward/backward (and burst_attention with this engine): q [1, S_global, H_local, D],
///   k, v [1, S_global, H_kv_local, D] — the WHOLE sequence for this rank's heads, not a slice;
///   attention_rows() says so. The kernel is LocalEngine's (no messages).
/// - totals(): attention seconds; forward/backward pairs are this rank's 1/P share of the
///   sequence's visible pairs (FLOP = 4·D·H·pairs summed over ranks stays the model's: each rank
///   computes H/P heads); bytes_sent = the payload of the collectives below
///   (Communicator's convention: all-gather (P−1)·own block, reduce-scatter the blocks of others).
/// - dtype: the attention's input dtype (AttentionEngine::dtype; F32, or BF16 for `--dtype bf16`).
/// Collective: constructor is not; every collective below is (all ranks of comm, same shapes).
/// Throws Error(InvalidArgument) unless S_global % P == 0, or for a dtype other than F32 / BF16.
class TpEngine final : public AttentionEngine {
 public:
  TpEngine(const Communicator& comm, std::int64_t S_global, const Mask& mask, int num_threads,
           DType dtype = DType::F32);
  const std::vector<std::int64_t>& positions() const override { return shard_; }
  std::int64_t attention_rows() const override { return S_global_; }
  std::int64_t planned_forward_pairs() const override { return pairs_share_; }
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override;
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv) override;

  /// Global positions [0, S_global) (RoPE angles of the gathered rows).
  const std::vector<std::int64_t>& sequence_positions() const { return sequence_.positions(); }
  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  const Communicator& comm() const { return comm_; }

  /// All-gather of rows: x [S_local, C] fp32 or bf16 → [S_global, C] of x's dtype, rank r's rows
  /// at r·S_local; bf16 moves its 16-bit patterns (S_local·C even). Collective.
  /// Bytes e·(P−1)·S_local·C sent per rank (e = 4 fp32, 2 bf16).
  torch::Tensor all_gather_rows(const torch::Tensor& x);
  /// Reduce-scatter of rows: y [S_global, C] fp32 partial sums → Σ_ranks y, rows of this rank
  /// [S_local, C] (summed in fp32 in MPI's order, identical on every run; partial sums never
  /// travel in 16 bits). Collective. Bytes 4·(P−1)·S_local·C sent per rank.
  torch::Tensor reduce_scatter_rows(const torch::Tensor& y);

 private:
  Communicator comm_;
  std::int64_t S_global_ = 0;
  LocalEngine sequence_;
  std::vector<std::int64_t> shard_;
  std::int64_t pairs_share_ = 0;
};

/// Autograd all-gather of the sequence shard (Megatron-SP's g before a column-parallel GEMM):
/// x [S_local, C] fp32 or bf16 → [S_global, C] in x's dtype (a bf16 x moves half the bytes: the
/// GEMM's input is bf16 either way, so gathering before or after the cast is the same values);
/// backward reduce-scatters the gradient's partial sums in fp32 and returns it in x's dtype.
/// Collective (forward and backward). The engine must outlive the autograd graph.
torch::Tensor sp_all_gather(const torch::Tensor& x, TpEngine& engine);

/// Autograd reduce-scatter of partial sums (Megatron-SP's ḡ after a row-parallel GEMM):
/// y [S_global, C] fp32 or bf16 → fp32 [S_local, C] (a bf16 y is widened first: the partial sums
/// add in fp32 — bf16 GEMM output rounded per rank, never the sum); backward all-gathers the
/// gradient in y's dtype (bf16: the rounding autograd applies to it anyway, done before the
/// gather, half the bytes) and returns it in y's dtype. Collective.
torch::Tensor sp_reduce_scatter(const torch::Tensor& y, TpEngine& engine);

}  // namespace burst::lm
