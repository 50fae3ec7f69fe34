// apps/lm/attention_fn.h — attention as a torch autograd function over burst.
//
// Owns: AttentionEngine (one sequence's attention for a training step or an evaluation:
// its layout, mask and positions, with counters), its two implementations — DistEngine (burst's
// DistAttention on this rank's slice; collective) and LocalEngine (one process, the kernel API on
// an explicit list of global positions; used with P = 1 and as the single-rank oracle of
// `burst eval`'s self-check) — and burst_attention(), the autograd function the model calls.
// Tensors: q [1, S_local, H, D], k, v [1, S_local, H_kv, D] fp32 contiguous (BSHD), this rank's
// tokens in increasing global position (engine.positions()). Does not: own weights.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
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
  std::int64_t forward_pairs = 0;    ///< visible (q, k) pairs in forward passes (FLOP = 4·D·H·pairs)
  std::int64_t backward_pairs = 0;   ///< same for backward passes (FLOP = 10·D·H·pairs)
};

class AttentionEngine {
 public:
  virtual ~AttentionEngine() = default;
  /// Global positions of this rank's tokens, increasing (RoPE angles use them).
  virtual const std::vector<std::int64_t>& positions() const = 0;
  /// Forward/backward on this rank's slice; shapes as in the file comment, lse [1, H, S_local].
  /// Collective for DistEngine (every rank of its communicator, same number of calls).
  virtual void forward(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const TensorView& lse) = 0;
  virtual void backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& out, const TensorView& lse,
                        const TensorView& dq, const TensorView& dk, const TensorView& dv) = 0;
  const EngineTotals& totals() const { return totals_; }

 protected:
  EngineTotals totals_;
};

/// burst's distributed attention over `comm` for one sequence of S_global tokens.
/// Collective (constructor and every pass): identical cfg, shape and mask on all ranks.
/// Throws: as DistAttention's constructor.
class DistEngine final : public AttentionEngine {
 public:
  DistEngine(const Communicator& comm, const DistConfig& cfg, const ProblemShape& shape, const Mask& mask);
  const std::vector<std::int64_t>& positions() const override { return attn_.positions(); }
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override;
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq,
                const TensorView& dk, const TensorView& dv) override;

 private:
  DistAttention attn_;
  std::int64_t H_ = 0, D_ = 0;
};

/// One process: attention over the tokens at `positions` (increasing global positions, any
/// subset of [0, S_global)) with `mask` on global positions. Not collective.
/// Throws: Error(InvalidArgument) for non-increasing positions.
class LocalEngine final : public AttentionEngine {
 public:
  LocalEngine(std::vector<std::int64_t> positions, const Mask& mask, std::int64_t S_global,
              int num_threads, KernelImpl impl = KernelImpl::Tiled);
  const std::vector<std::int64_t>& positions() const override { return positions_; }
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override;
  void backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& out, const TensorView& lse, const TensorView& dq,
                const TensorView& dk, const TensorView& dv) override;

 private:
  std::vector<std::int64_t> positions_;
  AttentionParams params_;
  std::int64_t pairs_ = 0;
};

/// A layer's attention forward result kept for layer checkpointing (BurstEngine's "full" mode,
/// docs/algorithm.md §9.1): out [1, S_local, H, D] and lse [1, H, S_local], fp32.
struct AttentionCache {
  torch::Tensor out, lse;
};

/// Autograd attention: out [1, S_local, H, D] = softmax(QKᵀ/√D + mask)·V over the whole
/// (distributed) sequence; backward calls engine.backward. q, k, v fp32; made contiguous here.
/// Collective when the engine is (except a replayed forward, below). The engine must outlive the
/// autograd graph. `cache`: null → plain; out undefined → the forward runs and records out and lse
/// in it; filled → the forward is skipped (no attention FLOPs, no messages) and cache->out is
/// returned. Backward is the same in all three cases.
/// Throws Error(InvalidArgument) for q not [1, S_local, H, D] with S_local = engine.positions()
/// size, or a filled cache whose shapes do not match q.
torch::Tensor burst_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              AttentionEngine& engine, AttentionCache* cache = nullptr);

/// Reference twin (for tests): materialised scores in the dtype of q (use fp64 as oracle),
/// differentiable by torch autograd; q_pos/k_pos are the global positions of the rows.
/// Fully masked rows give 0. Cost O(S_q·S_kv·H) memory.
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const std::vector<std::int64_t>& q_pos,
                                  const std::vector<std::int64_t>& k_pos, const Mask& mask,
                                  std::int64_t S_global);

}  // namespace burst::lm
