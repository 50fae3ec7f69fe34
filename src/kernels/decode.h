// src/kernels/decode.h — partial attention of a few query rows over one chunk of a KV cache
// (internal): the flash-decoding split of DistKVCache::decode (burst/kv_cache.h).
//
// A chunk holds up to C tokens of one sequence on one rank, stored for streaming: per KV head g,
// Kᵀ in panels of kDecodePanel columns, [C / kDecodePanel][D][kDecodePanel], then V row-major
// [C][Dp] (Dp = D rounded up to the widest vector, rows zero-padded), then the tokens' global
// positions. Elements are F32 or BF16 (stored rounded to nearest even; half the bytes to stream).
// The Tiled twin is two microkernel GEMMs per KV head (S = Q·Kᵀ over panels, O = P·V) with the
// base-2 softmax of the tiled forward between them; a BF16 chunk is widened (exactly) one
// 64-token panel / block at a time into an L1-resident scratch right before its GEMM, so K and V
// still stream from memory once. The Reference twin is plain loops in fp64 over the same
// (rounded) elements. Both write the chunk's normalised partial (out [S_q, H, D], lse [H, S_q] natural log);
// a row that sees no key of the chunk gets out 0, lse −inf. Callers merge partials with
// softmax_merge.h.
#pragma once

#include <cstdint>
#include <vector>

#include "burst/isa.h"
#include "burst/tensor.h"

namespace burst::kernels {

inline constexpr int kDecodePanel = 64;     ///< Kᵀ panel width (tokens): a multiple of every vector width
inline constexpr int kDecodeMaxWidth = 16;  ///< rows of V are padded to a multiple of this

/// Elements of one chunk per KV head: Kᵀ (C·D) then V (C·Dp).
inline std::int64_t decode_chunk_head_floats(std::int64_t C, std::int64_t D, std::int64_t Dp) {
  return C * (D + Dp);
}

/// One chunk, read-only (the cache owns the memory).
struct DecodeChunk {
  const void* data = nullptr;         ///< H_kv blocks of decode_chunk_head_floats elements
  DType dtype = DType::F32;           ///< F32 or BF16
  const std::int64_t* pos = nullptr;  ///< [count] global positions, increasing
  std::int64_t capacity = 0;          ///< C, a multiple of kDecodePanel
  std::int64_t count = 0;             ///< tokens in use (1..C)
};

/// The query side of one sequence for one call.
struct DecodeQuery {
  std::int64_t S_q = 0, H = 0, H_kv = 0, D = 0, Dp = 0;
  const float* q = nullptr;             ///< [S_q, H, D] contiguous
  const std::int64_t* q_pos = nullptr;  ///< [S_q] (causal) or nullptr (every key visible)
  float scale = 1.0f;
  Isa isa = Isa::Portable;  ///< resolved
};

/// Per-thread scratch of the Tiled twin (grown on demand, reused across chunks).
struct DecodeScratch {
  std::vector<float> q, s, o, inv, wide;
};

/// out [S_q, H, D], lse [H, S_q]: the chunk's normalised partial. Not thread-safe per scratch.
void decode_chunk_tiled(const DecodeQuery& dq, const DecodeChunk& chunk, float* out, float* lse,
                        DecodeScratch& scratch);
void decode_chunk_reference(const DecodeQuery& dq, const DecodeChunk& chunk, float* out, float* lse);

/// Stores token `t` (0 ≤ t < C) of a chunk from fp32 k, v rows [H_kv, D] (head stride hs, D
/// contiguous), rounded to nearest even for a BF16 chunk.
void decode_chunk_store(void* chunk_data, DType dtype, std::int64_t C, std::int64_t H_kv, std::int64_t D,
                        std::int64_t Dp, std::int64_t t, const float* k, const float* v, std::int64_t k_hs,
                        std::int64_t v_hs);
/// Reads token `t` back (widened) into k, v [H_kv, D] contiguous.
void decode_chunk_load(const void* chunk_data, DType dtype, std::int64_t C, std::int64_t H_kv, std::int64_t D,
                       std::int64_t Dp, std::int64_t t, float* k, float* v);

}  // namespace burst::kernels
