// tests/lowp_test_util.h — 16-bit (bf16 / fp16) test operands: a tensor rounded once to the
// dtype, kept as its bits (what the library reads) beside their exact fp32 widening (what the
// fp64 oracle reads).
#pragma once

#include <cstdint>
#include <vector>

#include "burst/tensor.h"

namespace burst::test {

struct Rounded {
  std::vector<std::uint16_t> bits;
  Tensor wide;      ///< the bits widened to fp32 (exact)
  TensorView view;  ///< dtype view of bits
};

/// t rounded to dt (nearest even) and widened back.
inline Rounded round_to(const Tensor& t, DType dt) {
  Rounded r{std::vector<std::uint16_t>(static_cast<std::size_t>(t.numel())), Tensor(t.shape()), {}};
  r.view = make_view(r.bits.data(), dt, t.shape());
  convert(t.view(), r.view);
  convert(r.view, r.wide.view());
  return r;
}

/// Zeroed 16-bit storage of the given shape (an output buffer).
inline Rounded empty_rounded(const std::vector<std::int64_t>& shape, DType dt) {
  Rounded r{{}, Tensor(shape), {}};
  r.bits.resize(static_cast<std::size_t>(r.wide.numel()));
  r.view = make_view(r.bits.data(), dt, shape);
  return r;
}

/// Refreshes r.wide from r.bits (after the library wrote them).
inline void widen_into(Rounded& r) { convert(r.view, r.wide.view()); }

}  // namespace burst::test
