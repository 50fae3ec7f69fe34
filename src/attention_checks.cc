// The operand checks of the public kernel boundary (attention_call.h): shapes, dtypes, row
// vectors (lse, delta) and output aliasing, each message naming the api and the values; shared by
// attention.cc's entry points and their device twins (attention_device.cc).
#include <cstdint>
#include <string>
#include <utility>

#include "attention_call.h"
#include "burst/error.h"

namespace burst::entry {

void check_tensor(const char* api, const char* name, const TensorView& t, int ndim) {
  BURST_CHECK(t.ndim == ndim, InvalidArgument, api, ": ", name, " must have ", ndim, " dims (",
              ndim == 4 ? "BSHD [B,S,H,D]" : "varlen THD [T,H,D]", "), got ", t.describe());
  for (int i = 0; i < ndim; ++i)
    BURST_CHECK(t.shape[static_cast<std::size_t>(i)] >= 0, InvalidArgument, api, ": ", name,
                " has a negative size: ", t.describe());
  BURST_CHECK(
      t.stride[static_cast<std::size_t>(ndim - 1)] == 1 || t.shape[static_cast<std::size_t>(ndim - 1)] <= 1,
      InvalidArgument, api, ": ", name, " must have D contiguous (last stride 1), got ", t.describe());
  BURST_CHECK(t.data != nullptr || t.numel() == 0, InvalidArgument, api, ": ", name, " has null data but ",
              t.numel(), " elements");
}

void check_same_shape(const char* api, const char* name, const TensorView& t, const char* ref_name,
                      const TensorView& ref) {
  check_tensor(api, name, t, ref.ndim);
  for (int i = 0; i < ref.ndim; ++i)
    BURST_CHECK(t.shape[static_cast<std::size_t>(i)] == ref.shape[static_cast<std::size_t>(i)],
                InvalidArgument, api, ": ", name, " ", t.describe(), " must have the shape of ", ref_name,
                " ", ref.describe());
}

// q, k, v share one storage dtype: F32, BF16 or F16 (computed in fp32 either way).
DType check_input_dtypes(const char* api, const TensorView& q, const TensorView& k, const TensorView& v) {
  for (const auto& [name, t] : {std::pair{"q", q}, {"k", k}, {"v", v}})
    BURST_CHECK(
        t.dtype != DType::F64, Unsupported, api, ": ", name, " is f64, which burst does not compute; ",
        "convert q, k and v to f32 (burst::convert; exact for values representable in f32) or bf16/f16");
  BURST_CHECK(q.dtype == k.dtype && q.dtype == v.dtype, InvalidArgument, api, ": mixed dtypes q ",
              to_string(q.dtype), ", k ", to_string(k.dtype), ", v ", to_string(v.dtype),
              "; q, k and v must share one dtype (f32, bf16 or f16)");
  return q.dtype;
}

// out, dout, dq, dk, dv: the input dtype or f32 (f32 keeps a result unrounded, e.g. a partial
// that a strategy merges later). accumulate adds in fp32 and needs an f32 destination: adding
// into bf16 would round every partial sum.
void check_output_dtype(const char* api, const char* name, const TensorView& t, DType input,
                        bool accumulate) {
  BURST_CHECK(t.dtype == input || t.dtype == DType::F32, InvalidArgument, api, ": ", name, " has dtype ",
              to_string(t.dtype), " but q, k, v are ", to_string(input), "; it must be ", to_string(input),
              " or f32");
  BURST_CHECK(!accumulate || t.dtype == DType::F32, InvalidArgument, api, ": accumulate=true adds into ",
              name, " in fp32 and needs an f32 ", name, ", got ", to_string(t.dtype),
              " (accumulating partial sums in 16 bits would round each one)");
}

// Row vectors (lse, delta): [B,H,S] for BSHD, [H,T] for varlen; any strides.
void check_rows(const char* api, const char* name, const TensorView& t, bool varlen, std::int64_t B,
                std::int64_t H, std::int64_t S) {
  const int ndim = varlen ? 2 : 3;
  BURST_CHECK(t.dtype == DType::F32, Unsupported, api, ": ", name, " has dtype ", to_string(t.dtype),
              "; only f32 is supported");
  const bool ok = t.ndim == ndim && (varlen ? (t.shape[0] == H && t.shape[1] == S)
                                            : (t.shape[0] == B && t.shape[1] == H && t.shape[2] == S));
  BURST_CHECK(ok, InvalidArgument, api, ": ", name, " must be ", varlen ? "[H, T_q] = [" : "[B, H, S_q] = [",
              varlen ? "" : std::to_string(B) + ", ", H, ", ", S, "], got ", t.describe());
  BURST_CHECK(t.data != nullptr || t.numel() == 0, InvalidArgument, api, ": ", name, " has null data");
}

namespace {

// Byte span [lo, hi) covered by a view, for the output-aliasing check.
std::pair<std::uintptr_t, std::uintptr_t> span(const TensorView& t) {
  if (t.numel() == 0) return {0, 0};
  auto lo = reinterpret_cast<std::uintptr_t>(t.data), hi = lo;
  for (int i = 0; i < t.ndim; ++i) {
    const auto u = static_cast<std::size_t>(i);
    const std::int64_t ext = (t.shape[u] - 1) * t.stride[u] * static_cast<std::int64_t>(dtype_size(t.dtype));
    if (ext < 0)
      lo -= static_cast<std::uintptr_t>(-ext);
    else
      hi += static_cast<std::uintptr_t>(ext);
  }
  return {lo, hi + dtype_size(t.dtype)};
}

}  // namespace

void check_no_alias(const char* api, const char* out_name, const TensorView& out, const char* in_name,
                    const TensorView& in) {
  const auto a = span(out), b = span(in);
  const bool overlap = a.first < a.second && b.first < b.second && a.first < b.second && b.first < a.second;
  BURST_CHECK(!overlap, InvalidArgument, api, ": output ", out_name, " overlaps ", in_name, " in memory (",
              out.describe(), " vs ", in.describe(), ")");
}

void check_forward_outputs(const char* api, const Call& c, const TensorView& q, const TensorView& k,
                           const TensorView& v, const TensorView& out, const TensorView& lse) {
  check_same_shape(api, "out", out, "q", q);
  check_output_dtype(api, "out", out, c.dtype, false);
  check_rows(api, "lse", lse, c.varlen, c.B, c.H, c.S_q);
  for (const auto& [name, t] : {std::pair{"out", out}, {"lse", lse}}) {
    check_no_alias(api, name, t, "q", q);
    check_no_alias(api, name, t, "k", k);
    check_no_alias(api, name, t, "v", v);
  }
  check_no_alias(api, "out", out, "lse", lse);
}

void check_gradients(const char* api, const Call& c, const TensorView& dout, const TensorView& q,
                     const TensorView& k, const TensorView& v, const TensorView& dq, const TensorView& dk,
                     const TensorView& dv, bool accumulate) {
  check_same_shape(api, "dq", dq, "q", q);
  check_same_shape(api, "dk", dk, "k", k);
  check_same_shape(api, "dv", dv, "k", k);
  check_output_dtype(api, "dout", dout, c.dtype, false);
  check_output_dtype(api, "dq", dq, c.dtype, accumulate);
  check_output_dtype(api, "dk", dk, c.dtype, accumulate);
  check_output_dtype(api, "dv", dv, c.dtype, accumulate);
  for (const auto& [name, t] : {std::pair{"dq", dq}, {"dk", dk}, {"dv", dv}}) {
    check_no_alias(api, name, t, "q", q);
    check_no_alias(api, name, t, "k", k);
    check_no_alias(api, name, t, "v", v);
    check_no_alias(api, name, t, "dout", dout);
  }
  check_no_alias(api, "dq", dq, "dk", dk);
  check_no_alias(api, "dq", dq, "dv", dv);
  check_no_alias(api, "dk", dk, "dv", dv);
}

}  // namespace burst::entry
