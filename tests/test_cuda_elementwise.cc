// The CUDA elementwise twins (src/device/cuda/elementwise.h) against their CPU twins, the oracle:
// copy vs burst::convert, fill and add vs host loops, merge vs burst::merge_forward, delta vs
// burst::attention_delta. Copy, fill, add and delta must match bit for bit (their products and
// sums round as the CPU's; NaN stays NaN, its payload aside where the hardware picks one); merge
// up to the ulps of the device's expf / log1pf, except its masked rows (lse = −inf), which must
// match exactly and never make NaN. Sizes sweep the edges of a warp and a block (1, 31, 32, 33,
// 255, 256, 257) and strided, padded, permuted views; the padding must come back untouched.
// CudaChecks.* (argument checks, before any CUDA call) run everywhere. CudaElementwise.* need a
// GPU and report SKIPPED with the driver's reason without one; the binary then exits 77, which
// ctest counts as skipped (tests/CMakeLists.txt). Built with BURST_CUDA_PLANT_ERROR, a test fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "burst/attention.h"
#include "burst/error.h"
#include "burst/softmax_merge.h"
#include "burst/tensor.h"
#include "cuda_test_util.h"
#include "device/cuda/cuda_memory.h"
#include "device/cuda/elementwise.h"

namespace burst {
namespace {

constexpr Device kGpu{DeviceKind::Cuda, 0};
const std::vector<std::int64_t> kEdgeSizes = {1, 31, 32, 33, 255, 256, 257};

/// Host bytes behind a view of `shape` whose dims are laid out in memory in `order` (outermost
/// first) with `pad` unused elements after each run of the innermost dim: strided, padded or
/// permuted views. The whole buffer (padding included) is what the device copy mirrors.
struct HostArray {
  std::vector<unsigned char> bytes;
  TensorView view;
};

HostArray host_array(DType dtype, std::vector<std::int64_t> shape, std::vector<int> order = {},
                     std::int64_t pad = 0) {
  const int nd = static_cast<int>(shape.size());
  if (order.empty())
    for (int i = 0; i < nd; ++i) order.push_back(i);
  HostArray a;
  a.view.dtype = dtype;
  a.view.ndim = nd;
  std::int64_t stride = 1;
  for (int j = nd - 1; j >= 0; --j) {
    const auto d = static_cast<std::size_t>(order[static_cast<std::size_t>(j)]);
    a.view.shape[d] = shape[d];
    a.view.stride[d] = stride;
    stride *= shape[d] + (j == nd - 1 ? pad : 0);
  }
  a.bytes.assign(static_cast<std::size_t>(stride) * dtype_size(dtype), 0);
  a.view.data = a.bytes.data();
  return a;
}

/// The device mirror of a HostArray: the same bytes and strides on the GPU.
struct Mirror {
  cuda::DeviceBuffer buffer;
  TensorView view;
};
Mirror to_device(const HostArray& a) {
  Mirror m{cuda::DeviceBuffer(kGpu.index, a.bytes.size()), a.view};
  m.buffer.upload(a.bytes.data(), a.bytes.size());
  m.view.data = m.buffer.data();
  m.view.device = kGpu;
  return m;
}
std::vector<unsigned char> from_device(const Mirror& m) {
  cudaDeviceSynchronize();
  std::vector<unsigned char> out(m.buffer.bytes());
  m.buffer.download(out.data(), out.size());
  return out;
}

/// Float bit patterns that exercise the rounding rules: ±0, ±inf, quiet NaNs with payloads,
/// subnormals, exact bf16 and f16 ties (odd and even), the f16 overflow edge (65504, 65520) and
/// subnormal edge (2^-14, 2^-24, 2^-25), then uniformly random bits.
std::vector<std::uint32_t> float_patterns(std::size_t n_random, std::uint64_t seed) {
  std::vector<std::uint32_t> v = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                  0xffc12345u, 0x7f800001u, 0x00000001u, 0x807fffffu, 0x477fe000u,
                                  0x477ff000u, 0x477fefffu, 0x38800000u, 0x33800000u, 0x33000000u,
                                  0x33000001u, 0x32ffffffu, 0x387fe000u};
  for (std::uint32_t hi : {0x3f80u, 0x3f81u, 0xbf80u, 0xbf81u, 0x7f7fu, 0x0001u, 0x4049u})
    for (std::uint32_t lo : {0x7fffu, 0x8000u, 0x8001u}) v.push_back(hi << 16 | lo);
  for (std::uint32_t exp = 103; exp <= 142; ++exp)  // f16 ties over its subnormal and normal range
    for (std::uint32_t m : {0x1000u, 0x3000u, 0x0fffu, 0x1001u}) v.push_back(exp << 23 | 0x2a000u | m);
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < n_random; ++i) v.push_back(static_cast<std::uint32_t>(rng()));
  // Signalling NaNs quieted: burst::convert's round trip through fp64 quiets them on x86, a
  // device copy moves the bits (every output of either is the same quiet NaN from here on).
  for (std::uint32_t& x : v)
    if ((x & 0x7fffffffu) > 0x7f800000u) x |= 0x00400000u;
  return v;
}

/// Fills a HostArray's elements (the view's, not the padding) with values of its dtype drawn
/// from float_patterns (fp32, fp64: widened, and scaled to leave fp32's range sometimes) or
/// random 16-bit patterns (bf16, f16: NaNs and infinities included).
void fill_values(HostArray& a, std::uint64_t seed) {
  const auto patterns = float_patterns(4096, seed);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  // Contiguous, of a's shape (convert takes equal shapes): element i is a's i-th in row-major order.
  HostArray flat = host_array(
      a.view.dtype, std::vector<std::int64_t>(a.view.shape.begin(), a.view.shape.begin() + a.view.ndim));
  for (std::int64_t i = 0; i < a.view.numel(); ++i) {
    const auto u = static_cast<std::size_t>(i);
    const std::uint32_t bits = patterns[u % patterns.size()];
    switch (a.view.dtype) {
      case DType::F32: std::memcpy(flat.bytes.data() + 4 * u, &bits, 4); break;
      case DType::F64: {
        const double scale[] = {1.0, 1e30, 1e-30, 1.0 + 0x1p-30};
        const double x = static_cast<double>(bits_float(bits)) * scale[rng() % 4];
        std::memcpy(flat.bytes.data() + 8 * u, &x, 8);
        break;
      }
      case DType::BF16:
      case DType::F16: {  // signalling NaNs quieted, as in float_patterns
        auto h = static_cast<std::uint16_t>(rng());
        const bool bf = a.view.dtype == DType::BF16;
        if ((h & 0x7fffu) > (bf ? 0x7f80u : 0x7c00u))
          h = static_cast<std::uint16_t>(h | (bf ? 0x40u : 0x200u));
        std::memcpy(flat.bytes.data() + 2 * u, &h, 2);
        break;
      }
    }
  }
  convert(flat.view, a.view);  // same dtype: a plain strided copy
}

/// Bitwise equality of two buffers, except that two NaNs are equal when `nan_any` (fp64 paths:
/// the GPU's conversions between fp32 and fp64 need not keep a NaN's payload, the host's do;
/// fp32 sums: a NaN result's payload is the hardware's).
::testing::AssertionResult same_bytes(const std::vector<unsigned char>& want,
                                      const std::vector<unsigned char>& got, DType dtype, bool nan_any) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << "sizes differ";
  const std::size_t es = dtype_size(dtype);
  for (std::size_t i = 0; i < want.size(); i += es) {
    if (std::memcmp(&want[i], &got[i], es) == 0) continue;
    if (nan_any && dtype == DType::F64) {
      double a, b;
      std::memcpy(&a, &want[i], 8);
      std::memcpy(&b, &got[i], 8);
      if (std::isnan(a) && std::isnan(b)) continue;
    }
    if (nan_any && dtype == DType::F32) {
      float a, b;
      std::memcpy(&a, &want[i], 4);
      std::memcpy(&b, &got[i], 4);
      if (std::isnan(a) && std::isnan(b)) continue;
    }
    std::uint64_t w = 0, g = 0;
    std::memcpy(&w, &want[i], es);
    std::memcpy(&g, &got[i], es);
    return ::testing::AssertionFailure() << "element " << i / es << " (" << to_string(dtype)
                                         << "): want bits 0x" << std::hex << w << ", got 0x" << g;
  }
  return ::testing::AssertionSuccess();
}

class CudaElementwise : public test::OnCudaDevice {};

TEST_F(CudaElementwise, CopyMatchesConvertForEveryDtypePairStrideAndEdgeSize) {
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16, DType::F64};
  std::uint64_t seed = 1;
  for (DType from : dtypes)
    for (DType to : dtypes)
      for (std::int64_t n : kEdgeSizes) {
        // pack: a permuted, padded [2,3,n] into a contiguous one; unpack: back into padded memory.
        HostArray src = host_array(from, {2, 3, n}, {1, 0, 2}, 3);
        fill_values(src, ++seed);
        HostArray packed = host_array(to, {2, 3, n});
        HostArray unpacked = host_array(to, {2, 3, n}, {2, 1, 0}, 1);
        const Mirror d_src = to_device(src), d_packed = to_device(packed), d_unpacked = to_device(unpacked);
        cuda::copy(d_src.view, d_packed.view, nullptr);
        cuda::copy(d_packed.view, d_unpacked.view, nullptr);
        convert(src.view, packed.view);
        convert(packed.view, unpacked.view);
        const bool wide = from == DType::F64 || to == DType::F64;
        EXPECT_TRUE(same_bytes(packed.bytes, from_device(d_packed), to, wide))
            << to_string(from) << " -> " << to_string(to) << " n=" << n;
        EXPECT_TRUE(same_bytes(unpacked.bytes, from_device(d_unpacked), to, wide))
            << to_string(from) << " -> " << to_string(to) << " n=" << n << " (unpack, padding untouched)";
      }
}

TEST_F(CudaElementwise, RoundingToBf16AndF16IsTheHostsBitForBitTiesToEven) {
  // Every 16-bit pattern widened, and 2^20 float patterns (the rounding edges, then random) narrowed.
  for (DType narrow : {DType::BF16, DType::F16}) {
    HostArray all = host_array(narrow, {65536}), wide = host_array(DType::F32, {65536});
    for (std::uint32_t h = 0; h < 65536; ++h) {
      const auto x = static_cast<std::uint16_t>(h);
      std::memcpy(all.bytes.data() + 2 * h, &x, 2);
    }
    const Mirror d_all = to_device(all), d_wide = to_device(wide);
    cuda::copy(d_all.view, d_wide.view, nullptr);
    convert(all.view, wide.view);
    // Signalling NaN patterns among them: the host's fp64 round trip quiets them, the device keeps
    // their bits; both are NaN.
    EXPECT_TRUE(same_bytes(wide.bytes, from_device(d_wide), DType::F32, true))
        << to_string(narrow) << " -> f32";

    const auto patterns = float_patterns(1 << 20, 7);
    const auto n = static_cast<std::int64_t>(patterns.size());
    HostArray f = host_array(DType::F32, {n}), r = host_array(narrow, {n});
    std::memcpy(f.bytes.data(), patterns.data(), 4 * patterns.size());
    const Mirror d_f = to_device(f), d_r = to_device(r);
    cuda::copy(d_f.view, d_r.view, nullptr);
    convert(f.view, r.view);
    EXPECT_TRUE(same_bytes(r.bytes, from_device(d_r), narrow, false)) << "f32 -> " << to_string(narrow);
  }
}

TEST_F(CudaElementwise, FillWritesTheRoundedValueAndLeavesThePadding) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::F64})
    for (std::int64_t n : kEdgeSizes)
      for (float value :
           {0.0f, -0.0f, 1.00390625f, 65520.0f, -std::numeric_limits<float>::infinity(), 3.14159f}) {
        HostArray a = host_array(dtype, {3, n}, {1, 0}, 2);
        fill_values(a, static_cast<std::uint64_t>(n));
        const Mirror d = to_device(a);
        cuda::fill(d.view, value, nullptr);
        float one[1] = {value};
        HostArray scalar = host_array(dtype, {1});
        convert(make_view(one, {1}), scalar.view);
        for (std::int64_t i = 0; i < 3; ++i)
          for (std::int64_t j = 0; j < n; ++j)
            std::memcpy(a.bytes.data() + (i * a.view.stride[0] + j * a.view.stride[1]) * dtype_size(dtype),
                        scalar.bytes.data(), dtype_size(dtype));
        EXPECT_TRUE(same_bytes(a.bytes, from_device(d), dtype, false))
            << to_string(dtype) << " n=" << n << " value=" << value;
      }
}

TEST_F(CudaElementwise, AddIsOneFp32RoundingPerElement) {
  for (DType src_dtype : {DType::F32, DType::BF16, DType::F16})
    for (std::int64_t n : kEdgeSizes) {
      HostArray dst = host_array(DType::F32, {2, n, 3}, {0, 2, 1}, 1), src = host_array(src_dtype, {2, n, 3});
      fill_values(dst, 11 + static_cast<std::uint64_t>(n));
      fill_values(src, 12 + static_cast<std::uint64_t>(n));
      const Mirror d_dst = to_device(dst), d_src = to_device(src);
      cuda::add(d_dst.view, d_src.view, nullptr);
      HostArray src32 = host_array(DType::F32, {2, n, 3});
      convert(src.view, src32.view);
      const float* s = reinterpret_cast<const float*>(src32.bytes.data());
      float* x = dst.view.f32();
      for (std::int64_t i = 0, e = 0; i < 2; ++i)
        for (std::int64_t j = 0; j < n; ++j)
          for (std::int64_t k = 0; k < 3; ++k, ++e)
            x[i * dst.view.stride[0] + j * dst.view.stride[1] + k * dst.view.stride[2]] += s[e];
      // A NaN sum's payload is the hardware's (x86 keeps an operand's, a GPU makes its own): NaN
      // must stay NaN; every other sum bit for bit.
      EXPECT_TRUE(same_bytes(dst.bytes, from_device(d_dst), DType::F32, true))
          << to_string(src_dtype) << " n=" << n;
    }
}

TEST_F(CudaElementwise, MergeMatchesMergeForwardAndMaskedRowsExactly) {
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f), lse_value(-30.0f, 30.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t D : {1, 31, 32, 33, 64, 128, 256})
    for (std::int64_t S : {1, 7, 33}) {
      const std::int64_t B = 2, H = 3;
      // out in SDPA memory order [B,H,S,D] (permuted BSHD strides), out_part contiguous.
      HostArray out = host_array(DType::F32, {B, S, H, D}, {0, 2, 1, 3}),
                lse = host_array(DType::F32, {B, H, S});
      HostArray part = host_array(DType::F32, {B, S, H, D}),
                lse_part = host_array(DType::F32, {B, H, S}, {0, 2, 1});
      float* l = lse.view.f32();
      float* lp = lse_part.view.f32();
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t s = 0; s < S; ++s) {
            // Rows cycle through: both seen, out masked, part masked, both masked.
            const auto kind = (b * H * S + h * S + s) % 4;
            float& la = l[b * lse.view.stride[0] + h * lse.view.stride[1] + s * lse.view.stride[2]];
            float& lb =
                lp[b * lse_part.view.stride[0] + h * lse_part.view.stride[1] + s * lse_part.view.stride[2]];
            la = kind == 1 || kind == 3 ? kNegInf : lse_value(rng);
            lb = kind == 2 || kind == 3 ? kNegInf : lse_value(rng);
            float* o =
                out.view.f32() + b * out.view.stride[0] + s * out.view.stride[1] + h * out.view.stride[2];
            float* p =
                part.view.f32() + b * part.view.stride[0] + s * part.view.stride[1] + h * part.view.stride[2];
            for (std::int64_t d = 0; d < D; ++d) {
              o[d] = la == kNegInf ? 0.0f : value(rng);  // a masked running row is 0 (precondition)
              p[d] = lb == kNegInf ? nan : value(rng);   // a masked partial is never read
            }
          }
      const Mirror d_out = to_device(out), d_lse = to_device(lse), d_part = to_device(part),
                   d_lse_part = to_device(lse_part);
      cuda::merge_forward(d_out.view, d_lse.view, d_part.view, d_lse_part.view, nullptr);
      const HostArray before = out, part_host = part;
      merge_forward(out.view, lse.view, part.view, lse_part.view);
      const auto got_out = from_device(d_out), got_lse = from_device(d_lse);
      const auto at = [](const std::vector<unsigned char>& bytes, const TensorView& v, std::int64_t b,
                         std::int64_t i, std::int64_t j, std::int64_t k = 0) {
        float x;
        std::memcpy(&x,
                    bytes.data() + 4 * (b * v.stride[0] + i * v.stride[1] + j * v.stride[2] +
                                        (v.ndim == 4 ? k * v.stride[3] : 0)),
                    4);
        return x;
      };
      // lse = max + log1p(exp(−|Δ|)): the device's log1pf / expf differ from glibc's by a few ulps,
      // so |Δlse| ≤ 4 eps (1 + |lse|); the weights exp(lse_j − lse) carry that as a relative error
      // (+ 2 ulps of expf); |out_j| ≤ 2, so |Δout| ≤ 4 (kLse + 4 eps). Masked rows are copies: exact.
      const double eps = std::numeric_limits<float>::epsilon(), kLse = 4 * eps * 31;
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t s = 0; s < S; ++s) {
            const float want_l = at(lse.bytes, lse.view, b, h, s), got_l = at(got_lse, lse.view, b, h, s);
            const float la = at(before.bytes, lse.view, b, h, s),
                        lb = at(lse_part.bytes, lse_part.view, b, h, s);
            ASSERT_FALSE(std::isnan(got_l)) << "lse of row " << b << "," << h << "," << s;
            if (la == kNegInf || lb == kNegInf) {
              EXPECT_EQ(got_l, want_l) << "masked row " << b << "," << h << "," << s;
            } else {
              EXPECT_NEAR(got_l, want_l, 4 * eps * (1 + std::fabs(want_l)))
                  << "row " << b << "," << h << "," << s;
            }
            for (std::int64_t d = 0; d < D; ++d) {
              const float got_o = at(got_out, out.view, b, s, h, d),
                          want_o = at(out.bytes, out.view, b, s, h, d);
              ASSERT_FALSE(std::isnan(got_o))
                  << "out " << b << "," << s << "," << h << "," << d << " D=" << D;
              if (lb == kNegInf)  // nothing added: out unchanged
                EXPECT_EQ(got_o, at(before.bytes, out.view, b, s, h, d)) << "D=" << D;
              else if (la == kNegInf)  // nothing before: out_part copied
                EXPECT_EQ(got_o, at(part_host.bytes, part.view, b, s, h, d)) << "D=" << D;
              else
                EXPECT_NEAR(got_o, want_o, 4 * (kLse + 4 * eps)) << "D=" << D << " S=" << S;
            }
          }
    }
}

TEST_F(CudaElementwise, DeltaIsAttentionDeltaBitForBit) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (std::int64_t D : {1, 7, 32, 33, 128, 256})
      for (bool varlen : {false, true}) {
        const std::int64_t B = varlen ? 1 : 2, S = 37, H = 3;
        HostArray out =
            varlen ? host_array(dtype, {S, H, D}, {1, 0, 2}) : host_array(dtype, {B, S, H, D}, {0, 2, 1, 3});
        HostArray dout = varlen ? host_array(dtype, {S, H, D}) : host_array(dtype, {B, S, H, D});
        HostArray delta =
            varlen ? host_array(DType::F32, {H, S}, {1, 0}, 2) : host_array(DType::F32, {B, H, S});
        // Finite inputs (16-bit patterns limited to finite ones by a round trip through fp32 values).
        std::mt19937_64 rng(static_cast<std::uint64_t>(D) * 3 + varlen);
        std::uniform_real_distribution<float> u(-3.0f, 3.0f);
        for (HostArray* a : {&out, &dout}) {
          HostArray f = host_array(
              DType::F32,
              std::vector<std::int64_t>(a->view.shape.begin(), a->view.shape.begin() + a->view.ndim));
          for (std::int64_t i = 0; i < f.view.numel(); ++i) f.view.f32()[i] = u(rng);
          convert(f.view, a->view);
        }
        const Mirror d_out = to_device(out), d_dout = to_device(dout), d_delta = to_device(delta);
        cuda::attention_delta(d_dout.view, d_out.view, d_delta.view, nullptr);
        attention_delta(dout.view, out.view, delta.view);
        EXPECT_TRUE(same_bytes(delta.bytes, from_device(d_delta), DType::F32, false))
            << to_string(dtype) << " D=" << D << (varlen ? " varlen" : "");
      }
}

// ---- argument checks: host-side, before any CUDA call (run without a GPU) ----------------------

/// A view marked as on `device` over no real memory (never dereferenced: the checks refuse first).
TensorView fake(std::vector<std::int64_t> shape, DType dtype = DType::F32, Device device = kGpu) {
  TensorView v = make_view(reinterpret_cast<const void*>(std::uintptr_t{256}), dtype, std::move(shape));
  v.device = device;
  return v;
}

void expect_error(ErrorKind kind, const std::string& needle, const std::function<void()>& call) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(e.message().find(needle), std::string::npos) << "expected '" << needle << "' in: " << e.what();
  }
}

TEST(CudaChecks, OperandsMustBeOnOneGpu) {
  const TensorView host = make_view(reinterpret_cast<const void*>(std::uintptr_t{256}), DType::F32, {4});
  expect_error(ErrorKind::InvalidArgument, "cuda::copy: dst is on host, but this is the CUDA implementation",
               [&] { cuda::copy(fake({4}), host, nullptr); });
  expect_error(ErrorKind::InvalidArgument, "cuda::copy: src is on host, but this call runs on cuda:0",
               [&] { cuda::copy(host, fake({4}), nullptr); });
  expect_error(ErrorKind::InvalidArgument, "cuda::add: src is on cuda:1, but this call runs on cuda:0", [&] {
    cuda::add(fake({4}), fake({4}, DType::F32, {DeviceKind::Cuda, 1}), nullptr);
  });
  expect_error(ErrorKind::InvalidArgument, "cuda::fill: dst is on host",
               [&] { cuda::fill(host, 1.0f, nullptr); });
  expect_error(ErrorKind::InvalidArgument, "cuda::merge_forward: lse_part is on host", [&] {
    cuda::merge_forward(fake({1, 2, 3, 4}), fake({1, 3, 2}), fake({1, 2, 3, 4}),
                        fake({1, 3, 2}, DType::F32, kHost), nullptr);
  });
  expect_error(ErrorKind::InvalidArgument, "cuda::attention_delta: delta is on host", [&] {
    cuda::attention_delta(fake({1, 2, 3, 4}), fake({1, 2, 3, 4}), fake({1, 3, 2}, DType::F32, kHost),
                          nullptr);
  });
}

TEST(CudaChecks, ShapesAndDtypesAsTheCpuTwins) {
  expect_error(ErrorKind::InvalidArgument, "shapes differ", [] {
    cuda::copy(fake({4, 3}), fake({3, 4}), nullptr);
  });
  expect_error(ErrorKind::Unsupported, "dst is bf16",
               [] { cuda::add(fake({4}, DType::BF16), fake({4}), nullptr); });
  expect_error(ErrorKind::InvalidArgument, "does not match [B,H,S]", [] {
    cuda::merge_forward(fake({1, 2, 3, 4}), fake({1, 2, 3}), fake({1, 2, 3, 4}), fake({1, 3, 2}), nullptr);
  });
  expect_error(ErrorKind::Unsupported, "out_part is bf16", [] {
    cuda::merge_forward(fake({1, 2, 3, 4}), fake({1, 3, 2}), fake({1, 2, 3, 4}, DType::BF16), fake({1, 3, 2}),
                        nullptr);
  });
  TensorView strided_d = fake({1, 2, 3, 4});
  strided_d.stride[3] = 2;
  expect_error(ErrorKind::InvalidArgument, "D contiguous", [&] {
    cuda::attention_delta(fake({1, 2, 3, 4}), strided_d, fake({1, 3, 2}), nullptr);
  });
  expect_error(ErrorKind::InvalidArgument, "must be [B,H,S]", [] {
    cuda::attention_delta(fake({1, 2, 3, 4}), fake({1, 2, 3, 4}), fake({1, 2, 3}), nullptr);
  });
  expect_error(ErrorKind::Unsupported, "f64", [] {
    cuda::attention_delta(fake({1, 2, 3, 4}, DType::F64), fake({1, 2, 3, 4}, DType::F64), fake({1, 3, 2}),
                          nullptr);
  });
}

TEST(CudaChecks, TheDeviceQueryGivesAReasonWhenThereIsNoDevice) {
  const cuda::DeviceQuery q = cuda::query_devices();
  EXPECT_GE(q.count, 0);
  EXPECT_EQ(q.count == 0, !q.reason.empty()) << q.reason;
}

}  // namespace
}  // namespace burst

int main(int argc, char** argv) { return burst::test::run_cuda_tests(argc, argv); }
