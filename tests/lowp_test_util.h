// tests/lowp_test_util.h — 16-bit (bf16 / fp16) test operands: a tensor rounded once to the
// dtype, kept as its bits (what the library reads) beside their exact fp32 widening (what the
// fp64 oracle reads).
#pragma once

#include <cstdint>
#include <vector>

#include "burst/tensor.h"

namespace burst::test {

struct Rounded {
  std::vector<std::uint16_t> bits;  ///< the dtype's storage: 2 words per element for fp32
  Tensor wide;                      ///< the bits widened to fp32 (exact)
  TensorView view;                  ///< dtype view of bits
};

/// 16-bit words of storage for n elements of dt (an fp32 "rounding" keeps the fp32 bits).
inline std::size_t words(std::int64_t n, DType dt) {
  return static_cast<std::size_t>(n) * dtype_size(dt) / sizeof(std::uint16_t);
}

/// t rounded to dt (nearest even) and widened back.
inline Rounded round_to(const Tensor& t, DType dt) {
  Rounded r{std::vector<std::uint16_t>(words(t.numel(), dt)), Tensor(t.shape()), {}};
  r.view = make_view(r.bits.data(), dt, t.shape());
  convert(t.view(), r.view);
  convert(r.view, r.wide.view());
  return r;
}

/// Zeroed 16-bit storage of the given shape (an output buffer).
inline Rounded empty_rounded(const std::vector<std::int64_t>& shape, DType dt) {
  Rounded r{{}, Tensor(shape), {}};
  r.bits.resize(words(r.wide.numel(), dt));
  r.view = make_view(r.bits.data(), dt, shape);
  return r;
}

/// Refreshes r.wide from r.bits (after the library wrote them).
inline void widen_into(Rounded& r) { convert(r.view, r.wide.view()); }

}  // namespace burst::test
