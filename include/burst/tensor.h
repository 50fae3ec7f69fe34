// burst/tensor.h — non-owning strided views and a small owning tensor.
//
// Owns: DType (F32 is the compute type; BF16 and F16 are storage types the kernels widen to
// fp32 tile by tile; F64 is named for callers and converted, never computed), the scalar
// bf16/fp16 rounding rules (round to nearest even — the slow twins of the vectorised converters
// in src/kernels/convert.h; host and device code share them), Device (which memory a view's
// pointer addresses: host, or CUDA device n — DLPack's DLDevice), TensorView (pointer + shape +
// strides in ELEMENTS, up to 4 dims, + device: a DLTensor) and Tensor (owning, contiguous fp32).
// Conventions: attention tensors are BSHD [B, S, H, D] (flash_attn) with D contiguous; SDPA's
// [B, H, S, D] memory is accepted by passing a BSHD-shaped view with permuted strides; varlen
// tensors are THD [total_tokens, H, D] with cu_seqlens. Invariant: every public entry point
// checks once (check_device) that its operands are on the device it runs on — today the host.
// Does not: allocate for views, or move memory between devices.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

// Marks the scalar rules below callable from CUDA device code too (nvcc), so a CUDA kernel
// rounds with the very same code as the host; empty for a host compiler.
#if defined(__CUDACC__)
#define BURST_HOST_DEVICE __host__ __device__
#else
#define BURST_HOST_DEVICE
#endif

namespace burst {

enum class DType : std::uint8_t { F32, F64, BF16, F16 };

/// Bytes per element of a dtype.
std::size_t dtype_size(DType dtype) noexcept;
/// "f32", "f64", "bf16", "f16".
const char* to_string(DType dtype) noexcept;
/// Parses "fp32"/"f32"/"float32", "bf16"/"bfloat16", "fp16"/"f16"/"float16", "fp64"/"f64"/"float64".
/// Throws: Error(InvalidArgument) naming the accepted spellings.
DType parse_dtype(const std::string& name);

// ---- scalar rounding (IEEE round to nearest, ties to even; NaN stays a quiet NaN) ----------
// bf16 = the top 16 bits of an fp32 (8-bit exponent, 7 stored mantissa bits): unit roundoff
// 2^-8 relative, same range as fp32. f16 = IEEE binary16 (5-bit exponent, 10 mantissa bits):
// unit roundoff 2^-11, finite range ±65504, subnormals down to 2^-24; larger values become ±inf.
// Widening either to fp32 is exact.

BURST_HOST_DEVICE inline std::uint32_t float_bits(float f) noexcept {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}
BURST_HOST_DEVICE inline float bits_float(std::uint32_t x) noexcept {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}
BURST_HOST_DEVICE inline float bf16_to_float(std::uint16_t h) noexcept {
  return bits_float(static_cast<std::uint32_t>(h) << 16);
}
BURST_HOST_DEVICE inline std::uint16_t bf16_from_float(float f) noexcept {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
BURST_HOST_DEVICE inline float f16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f)
    return bits_float(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));  // NaN → quiet (as F16C)
  if (e == 0) {  // zero or subnormal: m · 2^-24, exact in fp32
    const float v = static_cast<float>(m) * 0x1.0p-24f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}
BURST_HOST_DEVICE inline std::uint16_t f16_from_float(float f) noexcept {
  const std::uint32_t x = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // NaN
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // ≥ 65520 (and inf) → inf
  if (ax < 0x38800000u) {  // below 2^-14: subnormal or zero; 0.5f has ulp 2^-24 = the f16 subnormal step
    const float rounded = bits_float(ax) + 0.5f;
    return static_cast<std::uint16_t>(sign | (float_bits(rounded) - 0x3f000000u));
  }
  ax += 0xfffu + ((ax >> 13) & 1u);  // round the 13 dropped bits, ties to even
  return static_cast<std::uint16_t>(sign | ((ax - (112u << 23)) >> 13));
}

/// Where memory lives: the host (CPU), or CUDA device `index` (DLPack's DLDevice: kDLCPU,
/// kDLCUDA). Pinned or managed host memory is Host (the CPU reads it directly).
enum class DeviceKind : std::uint8_t { Host, Cuda };
struct Device {
  DeviceKind kind = DeviceKind::Host;
  int index = 0;  ///< the CUDA device ordinal; 0 for Host
  bool operator==(const Device&) const = default;
};
inline constexpr Device kHost{};
/// "host" or "cuda:<index>".
std::string to_string(const Device& device);
/// Parses "host" / "cpu", "cuda" (device 0) and "cuda:<n>" (torch's spelling: str(tensor.device)).
/// Throws: Error(InvalidArgument) for any other device (meta, mps, ...) or a bad index, naming it.
Device parse_device(const std::string& name);

/// Non-owning view. shape/stride entries past ndim are ignored; strides are in elements.
/// `data` addresses memory on `device` (default: host).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;
  std::array<std::int64_t, 4> shape{};
  std::array<std::int64_t, 4> stride{};
  Device device{};

  std::int64_t size(int dim) const { return shape[static_cast<std::size_t>(dim)]; }
  std::int64_t numel() const;
  bool is_contiguous() const;
  float* f32() const { return static_cast<float*>(data); }
  /// "[2,128,8,64] strides [65536,512,64,1] f32" — for error messages.
  std::string describe() const;
};

/// Contiguous row-major fp32 view over `data` with the given shape (1–4 dims).
/// Throws: Error(InvalidArgument) for ndim outside 1..4 or negative sizes.
TensorView make_view(float* data, std::vector<std::int64_t> shape);
TensorView make_view(const float* data, std::vector<std::int64_t> shape);
/// Contiguous row-major view of any dtype (e.g. bf16 storage as std::uint16_t). Throws: as above.
TensorView make_view(const void* data, DType dtype, std::vector<std::int64_t> shape);

/// The one device check of a public entry point, called once before any work with its operands
/// as (name, view) pairs — the names its documentation gives them: throws unless every operand
/// with data is on `runs_on`. An empty operand (data null: an optional output not requested) is
/// not checked. Not collective (collective entry points call it inside their agreement, so every
/// rank reaches the same verdict). Cost: a compare per operand.
/// Throws: Error(InvalidArgument) "<api>: <name> is on cuda:1, but this call runs on host; move
/// it there first", naming the first operand that is not.
void check_device(const char* api, const Device& runs_on, const char* name, const TensorView& view);
template <typename... More>
void check_device(const char* api, const Device& runs_on, const char* name, const TensorView& view,
                  const char* next_name, const TensorView& next_view, const More&... more) {
  check_device(api, runs_on, name, view);
  check_device(api, runs_on, next_name, next_view, more...);
}

/// dst ← src element-wise with dtype conversion (rounding to nearest even when narrowing; F64 is
/// rounded to fp32 first). Same shape, any strides, any pair of dtypes. Scalar: for tests, bench
/// and callers' boundaries, not hot loops. Not collective.
/// Throws: Error(InvalidArgument) on a shape mismatch.
void convert(const TensorView& src, const TensorView& dst);

/// Owning contiguous fp32 tensor (zero-initialised). Cheap to move, copyable.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<std::int64_t> shape);
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const { return static_cast<std::int64_t>(data_.size()); }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::vector<float>& vec() { return data_; }
  const std::vector<float>& vec() const { return data_; }
  TensorView view() { return make_view(data_.data(), shape_); }
  TensorView view() const { return make_view(data_.data(), shape_); }

 private:
  std::vector<std::int64_t> shape_;
  std::vector<float> data_;
};

}  // namespace burst
