// Merge form B of normalised partials (out_j, lse_j), fp32 and fp64 twins.
// The stable formula (docs/algorithm.md §2): lse = max + log1p(exp(−|lse_a − lse_b|)),
// out = exp(lse_a − lse)·out_a + exp(lse_b − lse)·out_b; both exponents are ≤ 0.
#include "burst/softmax_merge.h"

#include <cmath>
#include <limits>

#include "burst/error.h"

namespace burst {
namespace {

void check_operands(const TensorView& out, const TensorView& lse, const char* out_name,
                    const char* lse_name) {
  BURST_CHECK(out.dtype == DType::F32 && lse.dtype == DType::F32, Unsupported, "merge_forward: ", out_name,
              " is ", to_string(out.dtype), " and ", lse_name, " is ", to_string(lse.dtype),
              "; only f32 is supported");
  BURST_CHECK(out.ndim == 4 && lse.ndim == 3, InvalidArgument, "merge_forward: ", out_name,
              " must be [B,S,H,D] and ", lse_name, " [B,H,S], got ", out.describe(), " and ", lse.describe());
  BURST_CHECK(out.stride[3] == 1 || out.shape[3] <= 1, InvalidArgument, "merge_forward: ", out_name,
              " must have D contiguous (stride 1), got ", out.describe());
  BURST_CHECK(lse.shape[0] == out.shape[0] && lse.shape[1] == out.shape[2] && lse.shape[2] == out.shape[1],
              InvalidArgument, "merge_forward: ", lse_name, " ", lse.describe(),
              " does not match [B,H,S] of ", out_name, " ", out.describe());
}

// Weights of form B: the fp32 path uses the header's merge_weights (the one the kernels use);
// this is its fp64 twin for the reference.
MergeWeights weights(float lse_a, float lse_b) { return merge_weights(lse_a, lse_b); }
struct MergeWeights64 {
  double lse, w_a, w_b;
};
MergeWeights64 weights(double lse_a, double lse_b) {
  const double mx = lse_a > lse_b ? lse_a : lse_b;
  if (mx == -std::numeric_limits<double>::infinity()) return {mx, 1.0, 0.0};
  const double lse = mx + std::log1p(std::exp(-std::fabs(lse_a - lse_b)));
  return {lse, std::exp(lse_a - lse), std::exp(lse_b - lse)};
}

// One row of the merge, shared by both precisions. A side whose lse is −inf is not read (its
// weight is exactly 0), so it may hold anything, even NaN, without contaminating the result.
template <typename T>
void merge_row(T* out, T& lse, const T* out_part, T lse_part, std::int64_t D) {
  constexpr T kInf = std::numeric_limits<T>::infinity();
  const auto w = weights(lse, lse_part);
  if (lse_part == -kInf) {
    // Nothing to add; out keeps its values (w_a == 1 exactly) and lse stays.
  } else if (lse == -kInf) {
    for (std::int64_t d = 0; d < D; ++d) out[d] = out_part[d];
  } else {
    for (std::int64_t d = 0; d < D; ++d) out[d] = w.w_a * out[d] + w.w_b * out_part[d];
  }
  lse = w.lse;
}

}  // namespace

void merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                   const TensorView& lse_part) {
  check_device("merge_forward", kHost, "out", out, "lse", lse, "out_part", out_part, "lse_part", lse_part);
  check_operands(out, lse, "out", "lse");
  check_operands(out_part, lse_part, "out_part", "lse_part");
  for (int i = 0; i < 4; ++i)
    BURST_CHECK(out.shape[static_cast<std::size_t>(i)] == out_part.shape[static_cast<std::size_t>(i)],
                InvalidArgument, "merge_forward: out ", out.describe(), " and out_part ", out_part.describe(),
                " differ in shape");
  const std::int64_t B = out.shape[0], S = out.shape[1], H = out.shape[2], D = out.shape[3];
  float* o = out.f32();
  float* l = lse.f32();
  const float* op = out_part.f32();
  const float* lp = lse_part.f32();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t h = 0; h < H; ++h) {
        float& row_lse = l[b * lse.stride[0] + h * lse.stride[1] + s * lse.stride[2]];
        merge_row(o + b * out.stride[0] + s * out.stride[1] + h * out.stride[2], row_lse,
                  op + b * out_part.stride[0] + s * out_part.stride[1] + h * out_part.stride[2],
                  lp[b * lse_part.stride[0] + h * lse_part.stride[1] + s * lse_part.stride[2]], D);
      }
}

void merge_rows_reference(double* out, double* lse, const double* out_part, const double* lse_part, long rows,
                          long D) {
  for (long r = 0; r < rows; ++r) merge_row(out + r * D, lse[r], out_part + r * D, lse_part[r], D);
}

}  // namespace burst
