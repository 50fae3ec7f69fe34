// src/bshd_check.h — the one shape check of a BSHD operand at the library's boundaries
// (internal): DistAttention's local tensors (strategy.cc) and DistKVCache's K, V (kv_cache.cc).
// Dtype rules differ between the two and stay with their callers.
#pragma once

#include <cstdint>
#include <string>

#include "burst/error.h"
#include "burst/tensor.h"

namespace burst {

/// Throws Error(InvalidArgument) naming `what` unless t is [B, S, H, D] (S < 0: any length)
/// with D contiguous and data behind it (a view with no elements may be null). Not collective.
inline void check_bshd(const TensorView& t, const std::string& what, std::int64_t B, std::int64_t S,
                       std::int64_t H, std::int64_t D) {
  BURST_CHECK(t.data != nullptr || (t.ndim == 4 && t.numel() == 0), InvalidArgument, what, " is null");
  BURST_CHECK(t.ndim == 4 && t.size(0) == B && (S < 0 || t.size(1) == S) && t.size(2) == H &&
                  t.size(3) == D && (t.stride[3] == 1 || D == 1),
              InvalidArgument, what, " is ", t.describe(), ", expected [", B, ",",
              S < 0 ? std::string("S") : std::to_string(S), ",", H, ",", D, "] with D contiguous");
}

}  // namespace burst
