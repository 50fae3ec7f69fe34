// apps/lm/kv_dump.h — every layer's K/V of one context, as a rank holds it after a distributed
// forward, kept in memory or on disk so that `burst generate` can reuse what `burst eval`
// computed instead of running the same whole-KJV forward again.
//
// Owns: KvCaptureEngine (wraps an attention engine and copies each layer's K/V rows of real
// tokens as they pass), KvShard (this rank's rows: global positions and per-layer K/V), its file
// (one per rank, a JSON key line then raw arrays; written atomically) and the key that says which
// forward produced it. Exactness: eval's forward and generate's prefill are the same computation
// (same checkpoint, tokens, S_padded, mask, strategy, layout, threads, fp32 — Model::
// forward_inference either way), so a shard whose key matches holds bitwise the rows a fresh
// prefill would compute (test_lm_generate compares the two paths).
// Does not: communicate (callers agree on a verdict), decide what the K/V are used for.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_fn.h"
#include "model.h"
#include "train.h"

namespace burst::lm {

/// This rank's K/V of one context: rows in increasing global position.
struct KvShard {
  std::vector<std::int64_t> positions;   ///< [n] global positions, increasing
  std::vector<std::vector<float>> k, v;  ///< per layer [n, H_kv, D] contiguous fp32
};

/// Wraps `inner` (any engine; collective when it is) for one forward: after each layer's
/// attention it appends the K/V rows whose position is below `n_real` (padding dropped) to
/// shard(). `skip_last_attention`: the last of `layers` layers' attention is not run (out and lse
/// zeroed) — its output reaches only hidden states nobody reads when only the K/V are wanted;
/// the K/V themselves are computed before attention. Counters stay in inner.totals().
class KvCaptureEngine final : public AttentionEngine {
 public:
  KvCaptureEngine(AttentionEngine& inner, std::int64_t n_real, int layers, bool skip_last_attention);
  const std::vector<std::int64_t>& positions() const override { return inner_.positions(); }
  std::int64_t planned_forward_pairs() const override { return inner_.planned_forward_pairs(); }
  void forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse) override;
  /// Throws Error(Unsupported): capture is forward only.
  void backward(const TensorView&, const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                const TensorView&, const TensorView&, const TensorView&, const TensorView&) override;
  KvShard& shard() { return shard_; }
  double copy_seconds() const { return copy_seconds_; }

 private:
  AttentionEngine& inner_;
  std::int64_t n_real_;
  int layers_;
  bool skip_last_;
  int layer_ = 0;
  std::vector<std::size_t> rows_;  ///< local rows of real tokens (position < n_real), every layer's
  KvShard shard_;
  double copy_seconds_ = 0;
};

/// What identifies a context's K/V on one rank: the model's weights (FNV-1a 64 of every
/// parameter), the token cache, the context length and padded length, the mask kind, P, the rank,
/// strategy, layout, threads, dtype (only "f32" shards are reused) and the K/V shape. Not
/// collective.
nlohmann::json kv_shard_key(Model& model, const Corpus& corpus, std::int64_t n_ctx, std::int64_t S_padded,
                            const std::string& mask_kind, const RunOptions& run, int rank, int ranks);

/// dir/kv_rank<r>_of_<P>.bin
std::filesystem::path kv_shard_path(const std::filesystem::path& dir, int rank, int ranks);

/// Writes `shard` under `key` (temporary file, then rename). Not collective.
/// Throws Error(InvalidArgument) naming the path when it cannot be written.
void save_kv_shard(const std::filesystem::path& path, const nlohmann::json& key, const KvShard& shard);

/// Reads the shard at `path` if its key equals `key` and its sizes are consistent; otherwise
/// returns false with the reason in `why` (missing file, other key: the differing fields, short
/// file). Not collective; never throws for a bad file.
bool load_kv_shard(const std::filesystem::path& path, const nlohmann::json& key, KvShard& shard,
                   std::string& why);

/// FNV-1a 64 over the shard's positions and K/V bytes (the tests' bitwise comparison).
std::uint64_t kv_shard_fingerprint(const KvShard& shard);

}  // namespace burst::lm
