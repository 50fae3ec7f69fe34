// apps/lm/attention_fn.h — attention as a torch autograd function over burst.
//
// Owns: AttentionEngine (one sequence's attention for a training step or an evaluation:
// its layout, mask and positions, with counters), its two implementations — DistEngine (burst's
// DistAttention on this rank's slice; collective) and LocalEngine (one process, the kernel API on
// an explicit list of global positions; used with P = 1 and as the single-rank oracle of
// `burst eval`'s self-check) — and burst_attention(), the autograd function the model calls.
// Tensors: q [1, S_local, H, D], k, v [1, S_local, H_kv, D] contiguous (BSHD) in the engine's
// dtype (fp32, or bf16 for `--dtype bf16`: out then bf16 too, lse always fp32), this rank's
// tokens in increasing global position (engine.positions()). Does not: own weights.
#pragma once

#include "torch_api.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/mask.h"
#include "burst/strategy.h"

namespace burst::lm {

/// Counters summed over every pass since construction (or reset()).
struct EngineTotals {
  double forward_seconds = 0, backward_seconds = 0;
  std::int64_t bytes_sent = 0;
  std::int64_t forward_pairs = 0;   ///< visible (q, k) pairs in forward passes (FLOP = 4·D·H·pairs)
  std::int64_t backward_pairs = 0;  ///< same for backward passes (FLOP = 10·D·H·pairs)
  std::int64_t passes = 0;          ///< forward + backward passes run
  /// Passes whose q, k, v (and dO) reached the engine as bf16 views: equals `passes` on a
  /// `--dtype bf16` run (test_lm_bf16 checks it), 0 on fp32.
  std::int64_t bf16_passes = 0;
  /// Side that circulated in the last backward: "query" (BurstAttention's Q, dO, delta, lse + dQ
  /// ring), "kv" (RingAttention's K, V + dK, dV ring), as DistStats names it; "local" for
  /// LocalEngine; empty before any backward.
  std::string backward_side;
};

class AttentionEngine {
 public:
  virtual ~AttentionEngine() = default;
  /// Global positions of this rank's tokens, increasing (RoPE angles use them).
  virtual const std::vector<std::int64_t>& positions() const = 0;
  /// Forward/backward on this rank's slice; shapes as in the file comment, lse [1, H, S_local].
  /// Collective for DistEngine (every rank of its communicator, same number of calls).
  virtual void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse) = 0;
  virtual void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& lse, const TensorView& dq,
                        const TensorView& dk, const TensorView& dv) = 0;
  const EngineTotals& totals() const { return totals_; }
  /// Rows of q, k, v that forward/backward and burst_attention take: positions().size() (this
  /// rank's slice), except for TpEngine (tp_comm.h), whose attention runs over the whole sequence.
  virtual std::int64_t attention_rows() const { return static_cast<std::int64_t>(positions().size()); }
  /// Storage dtype of the q, k, v, dO and out views the engine takes: F32 or BF16 (lse and the
  /// gradients it returns are fp32 either way).
  DType dtype() const { return dtype_; }
  /// Visible (q, k) pairs per head of one forward pass on the busiest rank (progress estimates);
  /// 0 when the engine does not know.
  virtual std::int64_t planned_forward_pairs() const { return 0; }

  /// Seq-wise checkpointing (docs/algorithm.md §9.1): an engine over the first half of this
  /// sequence — global positions [0, S/2), whose tokens are the first half of this rank's
  /// (striped layout) — or nullptr when none was attached (make_engine(..., seq_wise = true)).
  AttentionEngine* first_half() { return first_half_.get(); }
  void set_first_half(std::unique_ptr<AttentionEngine> e) { first_half_ = std::move(e); }

 protected:
  /// Counts one pass over inputs of `input_dtype` in totals_ (passes, bf16_passes).
  void count_pass(DType input_dtype);
  EngineTotals totals_;
  DType dtype_ = DType::F32;

 private:
  std::unique_ptr<AttentionEngine> first_half_;
};

/// burst's distributed attention over `comm` for one sequence of S_global tokens; shape.dtype
/// (F32 or BF16) is the dtype of the views it takes.
/// Collective (constructor and every pass): identical cfg, shape and mask on all ranks.
/// Throws: as DistAttention's constructor.
class DistEngine final : public AttentionEngine {
 public:
  DistEngine(const Communicator& comm, const DistConfig& cfg, const ProblemShape& shape, const Mask& mask);
  const std::vector<std::int64_t>& positions() const override { return attn_.positions(); }
  std::int64_t planned_forward_pairs() const override;
  /// The backward side the plan resolved ("query" or "kv"; Plan::backward_side).
  std::string planned_backward_side() const;
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override;
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv) override;

 private:
  DistAttention attn_;
  std::int64_t H_ = 0, D_ = 0;
};

/// One process: attention over the tokens at `positions` (increasing global positions, any
/// subset of [0, S_global)) with `mask` on global positions; `dtype` (F32 or BF16) as
/// AttentionEngine::dtype(). Not collective.
/// Throws: Error(InvalidArgument) for non-increasing positions or another dtype.
class LocalEngine final : public AttentionEngine {
 public:
  LocalEngine(std::vector<std::int64_t> positions, const Mask& mask, std::int64_t S_global, int num_threads,
              KernelImpl impl = KernelImpl::Tiled, DType dtype = DType::F32);
  const std::vector<std::int64_t>& positions() const override { return positions_; }
  std::int64_t planned_forward_pairs() const override { return pairs_; }
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override;
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                const TensorView& dv) override;

 private:
  std::vector<std::int64_t> positions_;
  AttentionParams params_;
  std::int64_t pairs_ = 0;
};

/// A layer's attention forward result kept for layer checkpointing (BurstEngine's modes,
/// docs/algorithm.md §9.1); out in the engine's dtype, lse fp32:
/// - full (second_half_only = false): out [1, S_local, H, D] and lse [1, H, S_local];
/// - seq-wise (second_half_only = true): only the later half of the rank's rows,
///   out [1, S_local/2, H, D] and lse [1, H, S_local/2]; the replay recomputes the first half
///   with engine.first_half() — 1/4 of a causal forward's FLOPs, half its ring traffic.
struct AttentionCache {
  torch::Tensor out, lse;
  bool second_half_only = false;
};

/// The mask of the first `half` positions of a sequence of S tokens under `mask`: shorthands
/// unchanged; slices clipped to [0, half)² (slices wholly in the second half dropped).
/// Throws: Error(InvalidArgument) when some query in [0, half) sees a key in [half, S) (the
/// first half would not be self-contained: not a causal-type mask), or Error(Unsupported) for a
/// causal/windowed slice straddling `half` that is not square (clipping would move its
/// bottom-right-aligned diagonal).
Mask first_half_mask(const Mask& mask, std::int64_t S, std::int64_t half);

/// Autograd attention: out [1, S_local, H, D] = softmax(QKᵀ/√D + mask)·V over the whole
/// (distributed) sequence; backward calls engine.backward. q, k, v fp32 or bf16, cast to
/// engine.dtype() (round to nearest even, as torch's autocast) and made contiguous here; out comes
/// back in engine.dtype(), dO is cast to it; dq, dk, dv are the engine's fp32 accumulators (never
/// rounded to bf16; autograd casts them to the inputs' dtype).
/// Collective when the engine is (except a replayed forward, below). The engine must outlive the
/// autograd graph. `cache`: null → plain; out undefined → the forward runs and records out and lse
/// in it (seq-wise: their later half only); filled → full mode skips the forward (no attention
/// FLOPs, no messages) and returns cache->out; seq-wise runs engine.first_half() on the first
/// S_local/2 rows of q, k, v (collective over its ranks) and concatenates the cached half.
/// Backward is the same in every case.
/// Throws Error(InvalidArgument) for q, k or v not in host memory (burst/tensor.h check_device: a
/// CUDA tensor is named), q not [1, S_local, H, D] with S_local = engine.attention_rows(), a filled cache
/// whose shapes do not match q, or a seq-wise cache without engine.first_half() or with S_local odd.
torch::Tensor burst_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              AttentionEngine& engine, AttentionCache* cache = nullptr);

/// torch's dtype for an engine dtype: kFloat32 for F32, kBFloat16 for BF16.
/// Throws: Error(InvalidArgument) for F64 and F16 (the LM computes in fp32 or bf16).
torch::ScalarType to_torch(DType dt);

/// Reference twin (for tests): materialised scores in the dtype of q (use fp64 as oracle),
/// differentiable by torch autograd; q_pos/k_pos are the global positions of the rows.
/// Fully masked rows give 0. Cost O(S_q·S_kv·H) memory.
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const std::vector<std::int64_t>& q_pos,
                                  const std::vector<std::int64_t>& k_pos, const Mask& mask,
                                  std::int64_t S_global);

}  // namespace burst::lm
