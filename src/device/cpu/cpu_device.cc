// The CPU device (see cpu_device.h): the host loops the strategies used to hold.
#include "device/cpu/cpu_device.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "burst/attention.h"
#include "burst/error.h"
#include "burst/softmax_merge.h"
#include "kernels/step.h"

namespace burst::device {

namespace {

/// A view's shape and strides right-aligned to 4 dims (missing leading dims of size 1), byte
/// base and element size.
struct View4 {
  std::array<std::int64_t, 4> shape{1, 1, 1, 1}, stride{0, 0, 0, 0};
  char* base = nullptr;
  std::int64_t es = 4;
  int off = 0;  // 4 − ndim: the position of the view's dim 0
};

View4 view4(const TensorView& v) {
  BURST_CHECK(v.ndim >= 1 && v.ndim <= 4, Internal, "view with ndim ", v.ndim);
  View4 r;
  r.off = 4 - v.ndim;
  for (int i = 0; i < v.ndim; ++i) {
    r.shape[static_cast<std::size_t>(r.off + i)] = v.shape[static_cast<std::size_t>(i)];
    r.stride[static_cast<std::size_t>(r.off + i)] = v.stride[static_cast<std::size_t>(i)];
  }
  BURST_CHECK(r.stride[3] == 1 || r.shape[3] <= 1, Internal, "innermost stride must be 1: ", v.describe());
  r.base = static_cast<char*>(v.data);
  r.es = static_cast<std::int64_t>(dtype_size(v.dtype));
  return r;
}

/// Merges dims k = 2, 1, ... (down to, not including, `keep`) into the innermost run while they
/// are contiguous with it in both views (stride[k] = shape[3]·stride[3]), so that a copy moves
/// whole heads or tokens per memcpy — as long a run as the views allow.
void merge_inner(View4& a, View4& b, int keep) {
  for (int k = 2; k > keep; --k) {
    const auto u = static_cast<std::size_t>(k);
    if (a.shape[u] == 1 && b.shape[u] == 1) continue;  // nothing to walk: any stride
    const bool contiguous = (a.stride[3] == 1 || a.shape[3] <= 1) && (b.stride[3] == 1 || b.shape[3] <= 1) &&
                            a.stride[u] == a.shape[3] && b.stride[u] == b.shape[3];
    if (!contiguous) return;
    a.shape[3] *= a.shape[u];
    b.shape[3] *= b.shape[u];
    a.shape[u] = b.shape[u] = 1;
    a.stride[3] = b.stride[3] = 1;
  }
}

void check_same_shape(const TensorView& a, const TensorView& b, const char* what) {
  bool same = a.ndim == b.ndim;
  for (int i = 0; same && i < a.ndim; ++i) same = a.size(i) == b.size(i);
  BURST_CHECK(same, Internal, what, ": shapes differ: ", a.describe(), " vs ", b.describe());
}

/// Calls fn(src run, dst run, elements) for every innermost run of two views of one shape.
template <typename F>
void for_each_run_pair(const TensorView& src, const TensorView& dst, F&& fn) {
  View4 s = view4(src), d = view4(dst);
  merge_inner(s, d, -1);
  for (std::int64_t a = 0; a < s.shape[0]; ++a)
    for (std::int64_t b = 0; b < s.shape[1]; ++b)
      for (std::int64_t c = 0; c < s.shape[2]; ++c)
        fn(s.base + s.es * (a * s.stride[0] + b * s.stride[1] + c * s.stride[2]),
           d.base + d.es * (a * d.stride[0] + b * d.stride[1] + c * d.stride[2]), s.shape[3]);
}

/// Calls fn(run, elements) for every innermost run of a view.
template <typename F>
void for_each_run(const TensorView& view, F&& fn) {
  const View4 v = view4(view);
  for (std::int64_t a = 0; a < v.shape[0]; ++a)
    for (std::int64_t b = 0; b < v.shape[1]; ++b)
      for (std::int64_t c = 0; c < v.shape[2]; ++c)
        fn(v.base + v.es * (a * v.stride[0] + b * v.stride[1] + c * v.stride[2]), v.shape[3]);
}

float* as_f32(char* p) { return static_cast<float*>(static_cast<void*>(p)); }
std::uint16_t* as_u16(char* p) { return static_cast<std::uint16_t*>(static_cast<void*>(p)); }

}  // namespace

Buffer CpuDevice::allocate(std::int64_t bytes, MemoryKind) const {
  BURST_CHECK(bytes >= 0, Internal, "allocation of ", bytes, " bytes");
  return Buffer(ByteBuffer(static_cast<std::size_t>(bytes)));
}

void CpuDevice::copy_to_host(const std::byte* src, std::byte* dst_host, std::int64_t bytes) const {
  if (bytes > 0 && src != dst_host) std::memcpy(dst_host, src, static_cast<std::size_t>(bytes));
}

void CpuDevice::copy_from_host(const std::byte* src_host, std::byte* dst, std::int64_t bytes) const {
  if (bytes > 0 && src_host != dst) std::memcpy(dst, src_host, static_cast<std::size_t>(bytes));
}

void CpuDevice::copy(const TensorView& src, const TensorView& dst) const {
  check_same_shape(src, dst, "copy");
  BURST_CHECK(src.dtype == dst.dtype, Internal, "copy between dtypes: ", src.describe(), " to ",
              dst.describe());
  const auto es = dtype_size(src.dtype);
  if (src.is_contiguous() && dst.is_contiguous()) {
    if (src.data != dst.data) std::memcpy(dst.data, src.data, es * static_cast<std::size_t>(src.numel()));
    return;
  }
  for_each_run_pair(src, dst, [&](const char* s, char* d, std::int64_t n) {
    std::memcpy(d, s, es * static_cast<std::size_t>(n));
  });
}

void CpuDevice::index_copy(const TensorView& src, const TensorView& dst, int dim, const std::int64_t* index,
                           const std::int64_t*, bool scatter, bool accumulate) const {
  BURST_CHECK(src.dtype == dst.dtype && src.ndim == dst.ndim && dim >= 0 && dim < src.ndim, Internal,
              "index_copy along dim ", dim, " from ", src.describe(), " to ", dst.describe());
  BURST_CHECK(!accumulate || src.dtype == DType::F32, Internal, "index_copy accumulating into ",
              dst.describe());
  for (int i = 0; i < src.ndim; ++i)
    BURST_CHECK(i == dim || src.size(i) == dst.size(i), Internal, "index_copy: shapes differ off dim ", dim,
                ": ", src.describe(), " vs ", dst.describe());
  if (index == nullptr) {  // the identity: a plain copy (or add), runs as long as the views allow
    if (accumulate)
      add(src, dst);
    else
      copy(src, dst);
    return;
  }
  View4 s = view4(src), d = view4(dst);
  const int x = s.off + dim;  // the indexed dim among the 4
  merge_inner(s, d, x);
  const View4& dense = scatter ? s : d;                  // the side walked in order
  const std::int64_t n_inner = x == 3 ? 1 : s.shape[3];  // elements per copied run
  std::array<std::int64_t, 4> i{};
  for (i[0] = 0; i[0] < dense.shape[0]; ++i[0])
    for (i[1] = 0; i[1] < dense.shape[1]; ++i[1])
      for (i[2] = 0; i[2] < dense.shape[2]; ++i[2])
        for (i[3] = 0; i[3] < (x == 3 ? dense.shape[3] : 1); ++i[3]) {
          std::array<std::int64_t, 4> is = i, id = i;
          const auto ux = static_cast<std::size_t>(x);
          const std::int64_t mapped = index ? index[i[ux]] : i[ux];
          (scatter ? id : is)[ux] = mapped;
          const char* sp = s.base + s.es * (is[0] * s.stride[0] + is[1] * s.stride[1] + is[2] * s.stride[2] +
                                            is[3] * s.stride[3]);
          char* dp = d.base + d.es * (id[0] * d.stride[0] + id[1] * d.stride[1] + id[2] * d.stride[2] +
                                      id[3] * d.stride[3]);
          if (accumulate) {
            const float* a = static_cast<const float*>(static_cast<const void*>(sp));
            float* o = as_f32(dp);
            for (std::int64_t e = 0; e < n_inner; ++e) o[e] += a[e];
          } else {
            std::memcpy(dp, sp, static_cast<std::size_t>(n_inner * s.es));
          }
        }
}

void CpuDevice::fill(const TensorView& dst, float value) const {
  if (dst.dtype == DType::F32) {
    for_each_run(dst, [&](char* p, std::int64_t n) {
      float* f = as_f32(p);
      for (std::int64_t i = 0; i < n; ++i) f[i] = value;
    });
    return;
  }
  BURST_CHECK(dst.dtype == DType::BF16 || dst.dtype == DType::F16, Internal, "fill of ", dst.describe());
  const std::uint16_t h = dst.dtype == DType::BF16 ? bf16_from_float(value) : f16_from_float(value);
  for_each_run(dst, [&](char* p, std::int64_t n) {
    std::uint16_t* u = as_u16(p);
    for (std::int64_t i = 0; i < n; ++i) u[i] = h;
  });
}

void CpuDevice::add(const TensorView& x, const TensorView& acc) const {
  check_same_shape(x, acc, "add");
  BURST_CHECK(acc.dtype == DType::F32 && x.dtype != DType::F64, Internal, "add ", x.describe(), " into ",
              acc.describe());
  for_each_run_pair(x, acc, [&](const char* s, char* d, std::int64_t n) {
    float* a = as_f32(d);
    switch (x.dtype) {
      case DType::BF16: {
        const auto* h = static_cast<const std::uint16_t*>(static_cast<const void*>(s));
        for (std::int64_t i = 0; i < n; ++i) a[i] += bf16_to_float(h[i]);
        return;
      }
      case DType::F16: {
        const auto* h = static_cast<const std::uint16_t*>(static_cast<const void*>(s));
        for (std::int64_t i = 0; i < n; ++i) a[i] += f16_to_float(h[i]);
        return;
      }
      default: {
        const auto* f = static_cast<const float*>(static_cast<const void*>(s));
        for (std::int64_t i = 0; i < n; ++i) a[i] += f[i];
      }
    }
  });
}

void CpuDevice::convert(const TensorView& src, const TensorView& dst) const {
  check_same_shape(src, dst, "convert");
  if (src.dtype == dst.dtype) {
    copy(src, dst);
    return;
  }
  if (src.dtype == DType::F32 && (dst.dtype == DType::BF16 || dst.dtype == DType::F16)) {
    const bool bf = dst.dtype == DType::BF16;
    for_each_run_pair(src, dst, [&](const char* s, char* d, std::int64_t n) {
      const auto* f = static_cast<const float*>(static_cast<const void*>(s));
      std::uint16_t* h = as_u16(d);
      for (std::int64_t i = 0; i < n; ++i) h[i] = bf ? bf16_from_float(f[i]) : f16_from_float(f[i]);
    });
    return;
  }
  burst::convert(src, dst);  // widening and the rest: the scalar rules of burst/tensor.h
}

void CpuDevice::merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                              const TensorView& lse_part) const {
  burst::merge_forward(out, lse, out_part, lse_part);
}

void CpuDevice::attention_delta(const TensorView& dout, const TensorView& out,
                                const TensorView& delta) const {
  burst::attention_delta(dout, out, delta);
}

void CpuDevice::step_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView& out, const TensorView& lse,
                             const kernels::KernelParams& p) const {
  kernels::step_forward(q, k, v, out, lse, p);
}

void CpuDevice::step_backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                              const TensorView& v, const TensorView& lse, const TensorView& delta,
                              const TensorView& dq, const TensorView& dk, const TensorView& dv,
                              const kernels::KernelParams& p, bool accumulate, const TensorView*) const {
  // `out` is not read: the CPU kernels take delta
  kernels::step_backward(dout, q, k, v, lse, delta, dq, dk, dv, p, accumulate);
}

std::uint64_t CpuDevice::fingerprint(std::initializer_list<TensorView> views) const {
  constexpr std::uint64_t kPrime = 1099511628211ull;
  std::array<std::uint64_t, 4> lane{14695981039346656037ull, 1, 2, 3};
  for (const TensorView& v : views) {
    for (int i = 0; i < v.ndim; ++i)
      lane[0] = (lane[0] ^ static_cast<std::uint64_t>(v.shape[static_cast<std::size_t>(i)])) * kPrime;
    if (v.dtype != DType::F32) {  // 16-bit: the dtype, then the bytes of each run as words
      lane[0] = (lane[0] ^ (0x100u + static_cast<std::uint64_t>(v.dtype))) * kPrime;
      const auto es = static_cast<std::int64_t>(dtype_size(v.dtype));
      for_each_run(v, [&](const char* p, std::int64_t n) {
        const std::int64_t bytes = n * es;
        for (std::int64_t i = 0; i < bytes; i += 4) {
          std::uint32_t w = 0;
          std::memcpy(&w, p + i, static_cast<std::size_t>(std::min<std::int64_t>(4, bytes - i)));
          lane[static_cast<std::size_t>((i / 4) % 4)] =
              (lane[static_cast<std::size_t>((i / 4) % 4)] ^ w) * kPrime;
        }
      });
      continue;
    }
    for_each_run(v, [&](const char* p, std::int64_t n) {
      std::int64_t i = 0;
      for (; i + 4 <= n; i += 4) {
        for (std::size_t l = 0; l < 4; ++l) {
          std::uint32_t w = 0;
          std::memcpy(&w, p + 4 * (i + static_cast<std::int64_t>(l)), sizeof w);
          lane[l] = (lane[l] ^ w) * kPrime;
        }
      }
      for (; i < n; ++i) {
        std::uint32_t w = 0;
        std::memcpy(&w, p + 4 * i, sizeof w);
        lane[0] = (lane[0] ^ w) * kPrime;
      }
    });
  }
  std::uint64_t h = lane[0];
  for (std::size_t l = 1; l < 4; ++l) h = (h ^ lane[l]) * kPrime;
  return h;
}

namespace {

/// The exponent mask of a storage dtype: all ones there means inf or NaN.
std::uint32_t exponent_all_ones(DType dtype) {
  switch (dtype) {
    case DType::F32: return 0x7f800000u;
    case DType::BF16: return 0x7f80u;
    case DType::F16: return 0x7c00u;
    default:
      BURST_FAIL(Internal, "first_nonfinite: dtype ", to_string(dtype), " (expected f32, bf16 or f16)");
  }
}

/// The first of n contiguous elements of `Bits` at p whose exponent is all ones, or −1. Blocks
/// of 256 are tested with a branch-free OR, which the compiler vectorises; only a block with a
/// hit is walked element by element.
template <typename Bits>
std::int64_t first_all_ones(const char* p, std::int64_t n, Bits all_ones) {
  constexpr std::int64_t kBlock = 256;
  const auto is_hit = [&](std::int64_t i) {
    Bits b;
    std::memcpy(&b, p + i * static_cast<std::int64_t>(sizeof(Bits)), sizeof b);
    return static_cast<Bits>((b & all_ones) == all_ones);
  };
  for (std::int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const std::int64_t end = std::min(n, i0 + kBlock);
    Bits hit = 0;
    for (std::int64_t i = i0; i < end; ++i) hit |= is_hit(i);
    if (hit != 0)
      for (std::int64_t i = i0; i < end; ++i)
        if (is_hit(i) != 0) return i;
  }
  return -1;
}

}  // namespace

std::int64_t first_nonfinite_elementwise(const TensorView& t) {
  BURST_CHECK(t.ndim == 4, Internal, "first_nonfinite: ", t.describe(), " is not 4-dimensional");
  const auto* base = static_cast<const unsigned char*>(t.data);
  const std::size_t es = dtype_size(t.dtype);
  const std::uint32_t all_ones = exponent_all_ones(t.dtype);
  std::int64_t flat = 0;
  for (std::int64_t a = 0; a < t.size(0); ++a)
    for (std::int64_t b = 0; b < t.size(1); ++b)
      for (std::int64_t c = 0; c < t.size(2); ++c) {
        const unsigned char* row =
            base + static_cast<std::size_t>(a * t.stride[0] + b * t.stride[1] + c * t.stride[2]) * es;
        for (std::int64_t d = 0; d < t.size(3); ++d, ++flat) {
          std::uint32_t bits = 0;
          std::memcpy(&bits, row + static_cast<std::size_t>(d * t.stride[3]) * es, es);
          if ((bits & all_ones) == all_ones) return flat;
        }
      }
  return -1;
}

std::int64_t CpuDevice::first_nonfinite(const TensorView& t) const {
  BURST_CHECK(t.ndim == 4, Internal, "first_nonfinite: ", t.describe(), " is not 4-dimensional");
  const std::uint32_t all_ones = exponent_all_ones(t.dtype);
  if (t.stride[3] != 1 && t.size(3) > 1) return first_nonfinite_elementwise(t);
  // Row-major runs as long as the strides allow (a contiguous tensor is one run); the flat index
  // counts the elements of the runs before.
  View4 v = view4(t), same = v;
  merge_inner(v, same, -1);
  std::int64_t flat = 0;
  for (std::int64_t a = 0; a < v.shape[0]; ++a)
    for (std::int64_t b = 0; b < v.shape[1]; ++b)
      for (std::int64_t c = 0; c < v.shape[2]; ++c) {
        const char* run = v.base + v.es * (a * v.stride[0] + b * v.stride[1] + c * v.stride[2]);
        const std::int64_t at =
            t.dtype == DType::F32
                ? first_all_ones<std::uint32_t>(run, v.shape[3], all_ones)
                : first_all_ones<std::uint16_t>(run, v.shape[3], static_cast<std::uint16_t>(all_ones));
        if (at >= 0) return flat + at;
        flat += v.shape[3];
      }
  return -1;
}

std::shared_ptr<const Device> make_cpu_device() { return std::make_shared<const CpuDevice>(); }

}  // namespace burst::device
