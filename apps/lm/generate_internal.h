// apps/lm/generate_internal.h — what the two files of `burst generate` (generate.h) share:
// generate.cc (the options' checks, the prefill into the sharded caches, the decode loop and
// sampling, the report) and generate_check.cc (the single-rank self-check: the oracle's gathered
// cache, the recomputed prefill ranges and decode steps). Internal to burst_lm.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_fn.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "burst/kv_cache.h"
#include "burst/mask.h"
#include "model.h"
#include "options.h"

namespace burst::lm {

inline std::int64_t size_of(const std::vector<std::int64_t>& v) {
  return static_cast<std::int64_t>(v.size());
}

// Inference engines: forward only.
class ForwardOnlyEngine : public AttentionEngine {
 public:
  void backward(const TensorView&, const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                const TensorView&, const TensorView&, const TensorView&, const TensorView&) override {
    BURST_FAIL(Unsupported, "generate: inference engines have no backward");
  }
};

// One layer's K/V rows [L, H_kv, D], in global position order: the self-check's copy of a cache.
struct LayerKv {
  std::vector<float> k, v;
};

// Rank 0: every rank's cached K/V of sequence 0 in global position order [L, H_kv, D], and (when
// `owner` is given) the rank holding each position; other ranks get nothing. Collective
// (point-to-point to rank 0: nothing is replicated).
LayerKv gather_to_root(const Communicator& comm, const DistKVCache& cache, std::int64_t row,
                       std::vector<int>* owner);

// Logits [V] of the last row of the model's output on `tokens` through `engine`.
std::vector<float> last_logits(Model& model, const std::vector<std::int64_t>& tokens,
                               AttentionEngine& engine);

// The self-check's comparisons, on rank 0 alone, one process, no sharding, no merge (generate.h,
// Self-check 1 and 2): (1) the K/V of self-contained ranges of the prefill recomputed from the
// tokens (LocalEngine) against the distributed prefill's, then written over the gathered cache;
// (2) the first decode steps recomputed with attention over that whole cache (the kernel API)
// against the distributed decode's logits. `gathered`: gather_to_root's copy of every layer's
// cache; `fed`, `logits_seen`: the tokens and the distributed logits of the first decode steps,
// from position n_pre; `docs`: the prefill mask's document offsets; `owner`: the rank holding each
// position. Raises kv_rel and max_rel to the largest relative error (max |Δ| / max |reference|) of
// the K/V and of the logits, and appends one entry per recomputed range to `checked`.
void self_check_on_root(Model& model, const GenerateOptions& o, const std::vector<std::int64_t>& seq,
                        std::int64_t n_pre, std::int64_t S_padded, const Mask& mask,
                        const std::vector<std::int32_t>& docs, const std::vector<int>& owner,
                        std::vector<LayerKv>& gathered, const std::vector<std::vector<std::int64_t>>& fed,
                        const std::vector<std::vector<float>>& logits_seen, double& kv_rel, double& max_rel,
                        nlohmann::json& checked);

}  // namespace burst::lm
