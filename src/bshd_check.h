// src/bshd_check.h — the one shape check and the one finiteness check of a BSHD operand at the
// library's boundaries (internal): DistAttention's local tensors (strategy.cc) and DistKVCache's
// K, V and q (kv_cache.cc). Dtype rules differ between the two and stay with their callers.
#pragma once

#include <cstdint>
#include <string>

#include "burst/error.h"
#include "burst/tensor.h"
#include "device/device.h"

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

/// Throws Error(InvalidArgument) when t [B, S, H, D] holds a NaN or infinity (docs/api.md § NaN
/// and inf: a masked key inside a computed tile still meets V with weight 0, and 0·NaN = NaN, so
/// a NaN reaches rows that do not see it and no result would be exact). The message names
/// `what`, the first such element [b,i,h,d] and where(b, i), the caller's words for token i of
/// batch row b (its global position, its sequence id). One read of t on its device
/// (Device::first_nonfinite: bits only, any dtype). Not collective.
template <typename Where>
void check_finite_bshd(const device::Device& dev, const TensorView& t, const std::string& what,
                       Where&& where) {
  const std::int64_t at = dev.first_nonfinite(t);
  if (at < 0) return;
  const std::int64_t D = t.size(3), H = t.size(2), S = t.size(1);
  const std::int64_t b = at / (D * H * S), i = at / (D * H) % S;
  BURST_FAIL(InvalidArgument, what, " holds a NaN or infinity at [", b, ",", i, ",", at / D % H, ",", at % D,
             "] (", where(b, i),
             "): exact attention needs finite inputs, since a NaN would reach rows that do not see it; find "
             "where it came from (numpy.isfinite / torch.isfinite) or drop that token");
}

}  // namespace burst
