// The CUDA elementwise twins (elementwise.h). Host side: validation (the CPU twins' rules), then
// one launch. Device side: one thread per element (copy, fill, add), one warp per row (merge),
// one thread per row (delta). Products and sums use __fmul_rn / __fadd_rn, which nvcc never
// contracts into an FMA, so they round exactly as the CPU twins do (compiled without FMA).
#include <cuda_runtime.h>

#include <cstdint>
#include <tuple>
#include <utility>

#include "burst/error.h"
#include "burst/softmax_merge.h"
#include "burst/tensor.h"
#include "device/cuda/cuda_memory.h"
#include "device/cuda/elementwise.h"
#include "device/out_synth.h"

namespace burst::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 1 << 20;  // grid-stride loops beyond this

/// A view as the kernels read it (plain arrays: std::array's members are host functions).
struct Strided {
  char* data = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;
  std::int64_t shape[4] = {1, 1, 1, 1};
  std::int64_t stride[4] = {0, 0, 0, 0};
};

Strided strided(const TensorView& t) {
  Strided s;
  s.data = static_cast<char*>(t.data);
  s.dtype = t.dtype;
  s.ndim = t.ndim;
  for (int i = 0; i < t.ndim; ++i) {
    s.shape[i] = t.shape[static_cast<std::size_t>(i)];
    s.stride[i] = t.stride[static_cast<std::size_t>(i)];
  }
  return s;
}

/// Offset in elements of the e-th element in row-major order (e < numel, every size ≥ 1).
__device__ std::int64_t offset(const Strided& t, std::int64_t e) {
  std::int64_t off = 0;
  for (int i = t.ndim - 1; i >= 0; --i) {
    off += (e % t.shape[i]) * t.stride[i];
    e /= t.shape[i];
  }
  return off;
}

// load / store: the device twins of burst::convert's (src/tensor.cc), value for value. Without
// an F64 operand values travel as fp32 (as bit-exact moves: a NaN keeps its payload, as on the
// host); with one, as fp64, as the host's do.
__device__ float load_f(const Strided& t, std::int64_t off) {
  switch (t.dtype) {
    case DType::F32: return reinterpret_cast<const float*>(t.data)[off];
    case DType::F64: return static_cast<float>(reinterpret_cast<const double*>(t.data)[off]);
    case DType::BF16: return bf16_to_float(reinterpret_cast<const std::uint16_t*>(t.data)[off]);
    case DType::F16: return f16_to_float(reinterpret_cast<const std::uint16_t*>(t.data)[off]);
  }
  return 0;
}
__device__ double load(const Strided& t, std::int64_t off) {
  return t.dtype == DType::F64 ? reinterpret_cast<const double*>(t.data)[off] : load_f(t, off);
}

__device__ std::uint16_t to_bf16(float f) {
#if defined(BURST_CUDA_PLANT_ERROR)
  // The planted error (docs/gpu.md): ties round away from zero, not to even. A test must fail.
  return static_cast<std::uint16_t>((float_bits(f) + 0x8000u) >> 16);
#else
  return bf16_from_float(f);
#endif
}

__device__ void store_f(const Strided& t, std::int64_t off, float f) {
  switch (t.dtype) {
    case DType::F32: reinterpret_cast<float*>(t.data)[off] = f; break;
    case DType::F64: reinterpret_cast<double*>(t.data)[off] = f; break;
    case DType::BF16: reinterpret_cast<std::uint16_t*>(t.data)[off] = to_bf16(f); break;
    case DType::F16: reinterpret_cast<std::uint16_t*>(t.data)[off] = f16_from_float(f); break;
  }
}
__device__ void store(const Strided& t, std::int64_t off, double x) {
  if (t.dtype == DType::F64) {
    reinterpret_cast<double*>(t.data)[off] = x;
  } else {
    store_f(t, off, static_cast<float>(x));
  }
}

__device__ std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ std::int64_t grid_threads() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

__global__ void copy_kernel(Strided src, Strided dst, std::int64_t n) {
  const bool wide = src.dtype == DType::F64 || dst.dtype == DType::F64;
  for (std::int64_t e = first_index(); e < n; e += grid_threads()) {
    if (wide) {
      store(dst, offset(dst, e), load(src, offset(src, e)));
    } else {
      store_f(dst, offset(dst, e), load_f(src, offset(src, e)));
    }
  }
}

__global__ void fill_kernel(Strided dst, float value, std::int64_t n) {
  for (std::int64_t e = first_index(); e < n; e += grid_threads()) store_f(dst, offset(dst, e), value);
}

__global__ void add_kernel(Strided dst, Strided src, std::int64_t n) {
  for (std::int64_t e = first_index(); e < n; e += grid_threads()) {
    float* x = reinterpret_cast<float*>(dst.data) + offset(dst, e);
    *x = __fadd_rn(*x, load_f(src, offset(src, e)));
  }
}

/// One thread per element of the walked side (dst for a gather, src for a scatter): its index
/// along `dim` maps through `index` to the other side's. Moves elements as raw bits of their size.
__global__ void index_copy_kernel(Strided src, Strided dst, int dim, const std::int64_t* index, bool scatter,
                                  bool accumulate, int element_bytes, std::int64_t n) {
  const Strided& walked = scatter ? src : dst;
  for (std::int64_t e = first_index(); e < n; e += grid_threads()) {
    std::int64_t rest = e, src_off = 0, dst_off = 0;
    for (int i = walked.ndim - 1; i >= 0; --i) {
      const std::int64_t k = rest % walked.shape[i];
      rest /= walked.shape[i];
      const std::int64_t mapped = i == dim ? index[k] : k;
      src_off += (scatter ? k : mapped) * src.stride[i];
      dst_off += (scatter ? mapped : k) * dst.stride[i];
    }
    if (accumulate) {
      float* x = reinterpret_cast<float*>(dst.data) + dst_off;
      *x = __fadd_rn(*x, reinterpret_cast<const float*>(src.data)[src_off]);
    } else if (element_bytes == 2) {
      reinterpret_cast<std::uint16_t*>(dst.data)[dst_off] =
          reinterpret_cast<const std::uint16_t*>(src.data)[src_off];
    } else if (element_bytes == 4) {
      reinterpret_cast<std::uint32_t*>(dst.data)[dst_off] =
          reinterpret_cast<const std::uint32_t*>(src.data)[src_off];
    } else {
      reinterpret_cast<std::uint64_t*>(dst.data)[dst_off] =
          reinterpret_cast<const std::uint64_t*>(src.data)[src_off];
    }
  }
}

/// Element offset of row (b, s, h) of a [B,S,H,D] view, and of entry (b, h, s) of a [B,H,S] row
/// field (lse, delta).
__device__ std::int64_t bshd_row(const Strided& t, std::int64_t b, std::int64_t s, std::int64_t h) {
  return b * t.stride[0] + s * t.stride[1] + h * t.stride[2];
}
__device__ std::int64_t bhs_entry(const Strided& t, std::int64_t b, std::int64_t h, std::int64_t s) {
  return b * t.stride[0] + h * t.stride[1] + s * t.stride[2];
}

/// One warp per row (b, s, h) of out [B,S,H,D]: every lane reads the row's lse before lane 0
/// writes the merged one. The three cases are merge_row's (src/softmax_merge.cc).
__global__ void merge_kernel(Strided out, Strided lse, Strided part, Strided lse_part) {
  constexpr int kWarp = 32;
  const std::int64_t B = out.shape[0], S = out.shape[1], H = out.shape[2], D = out.shape[3];
  const std::int64_t rows = B * S * H;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  for (std::int64_t row = first_index() / kWarp; row < rows; row += grid_threads() / kWarp) {
    const std::int64_t h = row % H, s = (row / H) % S, b = row / (H * S);
    float* o = reinterpret_cast<float*>(out.data) + bshd_row(out, b, s, h);
    const float* p = reinterpret_cast<const float*>(part.data) + bshd_row(part, b, s, h);
    float* l = reinterpret_cast<float*>(lse.data) + bhs_entry(lse, b, h, s);
    const float l_part = reinterpret_cast<const float*>(lse_part.data)[bhs_entry(lse_part, b, h, s)];
    const float l_old = *l;
    const MergeWeights w = merge_weights(l_old, l_part);
    if (l_part == kNegInf) {
      // Nothing to add: out keeps its values, lse stays (w.lse == l_old).
    } else if (l_old == kNegInf) {
      for (std::int64_t d = lane; d < D; d += kWarp) o[d] = p[d];
    } else {
      for (std::int64_t d = lane; d < D; d += kWarp)
        o[d] = __fadd_rn(__fmul_rn(w.w_a, o[d]), __fmul_rn(w.w_b, p[d]));
    }
    __syncwarp();
    if (lane == 0) *l = w.lse;
  }
}

/// One thread per row (b, h, s) of delta [B,H,S]: Σ_d in order, each step rounded as the CPU's.
__global__ void delta_kernel(Strided dout, Strided out, Strided delta) {
  const std::int64_t B = out.shape[0], S = out.shape[1], H = out.shape[2], D = out.shape[3];
  const std::int64_t rows = B * H * S;
  for (std::int64_t row = first_index(); row < rows; row += grid_threads()) {
    const std::int64_t s = row % S, h = (row / S) % H, b = row / (S * H);
    const std::int64_t oo = bshd_row(out, b, s, h), og = bshd_row(dout, b, s, h);
    float acc = 0.0f;
    for (std::int64_t d = 0; d < D; ++d)
      acc = __fadd_rn(acc, __fmul_rn(load_f(out, oo + d), load_f(dout, og + d)));
    reinterpret_cast<float*>(delta.data)[bhs_entry(delta, b, h, s)] = acc;
  }
}

/// One thread per row (b, s, h) of out [B,S,H,D]: the stand-in O' of device/out_synth.h.
__global__ void synth_out_kernel(Strided dout, Strided delta, Strided out) {
  const std::int64_t B = out.shape[0], S = out.shape[1], H = out.shape[2], D = out.shape[3];
  const std::int64_t rows = B * H * S;
  for (std::int64_t row = first_index(); row < rows; row += grid_threads()) {
    const std::int64_t s = row % S, h = (row / S) % H, b = row / (S * H);
    const std::int64_t oo = bshd_row(out, b, s, h), og = bshd_row(dout, b, s, h);
    const float r = reinterpret_cast<const float*>(delta.data)[bhs_entry(delta, b, h, s)];
    const float c = device::out_synth_scale([&](std::int64_t d) { return load_f(dout, og + d); }, D, r);
    for (std::int64_t d = 0; d < D; ++d)
      store_f(out, oo + d, device::out_synth_value(load_f(dout, og + d), c));
  }
}

/// Folds the smallest row-major index e < n of an element with all exponent bits set into
/// *first (all ones = none): each thread's first hit (its indices only grow), the warp's
/// minimum, one atomicMin per warp that found one.
__global__ void first_nonfinite_kernel(Strided t, std::int64_t n, unsigned long long* first) {
  const bool wide = t.dtype == DType::F32;
  const std::uint32_t ones = wide ? 0x7f800000u : (t.dtype == DType::BF16 ? 0x7f80u : 0x7c00u);
  unsigned long long mine = ~0ull;
  for (std::int64_t e = first_index(); e < n; e += grid_threads()) {
    const std::int64_t off = offset(t, e);
    const std::uint32_t bits = wide ? reinterpret_cast<const std::uint32_t*>(t.data)[off]
                                    : reinterpret_cast<const std::uint16_t*>(t.data)[off];
    if ((bits & ones) == ones) {
      mine = static_cast<unsigned long long>(e);
      break;
    }
  }
  for (int lane = 16; lane > 0; lane /= 2) {
    const unsigned long long other = __shfl_down_sync(0xffffffffu, mine, lane);
    mine = other < mine ? other : mine;
  }
  if ((threadIdx.x & 31u) == 0 && mine != ~0ull) atomicMin(first, mine);
}

// ---------------------------------------------------------------- host side -----------------

unsigned blocks_for(std::int64_t threads) {
  const std::int64_t b = (threads + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

/// The CUDA device every operand of `api` is on (the first operand's, which must be a GPU).
Device on_gpu(const char* api, const char* name, const TensorView& first) {
  BURST_CHECK(first.device.kind == DeviceKind::Cuda, InvalidArgument, api, ": ", name, " is on ",
              to_string(first.device), ", but this is the CUDA implementation; pass views of device memory");
  return first.device;
}

void check_rank(const char* api, const char* name, const TensorView& t) {
  BURST_CHECK(t.ndim >= 1 && t.ndim <= 4, InvalidArgument, api, ": ", name, " must have 1 to 4 dims, got ",
              t.describe());
  for (int i = 0; i < t.ndim; ++i)
    BURST_CHECK(t.size(i) >= 0, InvalidArgument, api, ": ", name, " has a negative size: ", t.describe());
  BURST_CHECK(t.data != nullptr || t.numel() == 0, InvalidArgument, api, ": ", name, " has null data but ",
              t.numel(), " elements");
}

void check_same_shape(const char* api, const char* a_name, const TensorView& a, const char* b_name,
                      const TensorView& b) {
  bool same = a.ndim == b.ndim;
  for (int i = 0; same && i < a.ndim; ++i) same = a.size(i) == b.size(i);
  BURST_CHECK(same, InvalidArgument, api, ": shapes differ: ", a_name, " ", a.describe(), ", ", b_name, " ",
              b.describe());
}

void check_f32(const char* api, const char* name, const TensorView& t) {
  BURST_CHECK(t.dtype == DType::F32, Unsupported, api, ": ", name, " is ", to_string(t.dtype),
              "; only f32 is supported");
}

void check_launch(const char* api) { check(cudaGetLastError(), api); }

/// A varlen [T, H, D] / [H, T] pair as B = 1 BSHD / [B, H, S] (the CPU twin's `sequence`).
TensorView as_bshd(const TensorView& t) {
  if (t.ndim != 3) return t;
  TensorView s = t;
  s.ndim = 4;
  s.shape = {1, t.shape[0], t.shape[1], t.shape[2]};
  s.stride = {0, t.stride[0], t.stride[1], t.stride[2]};
  return s;
}
TensorView as_rows(const TensorView& t) {
  if (t.ndim != 2) return t;
  TensorView s = t;
  s.ndim = 3;
  s.shape = {1, t.shape[0], t.shape[1], 0};
  s.stride = {0, t.stride[0], t.stride[1], 0};
  return s;
}

}  // namespace

void copy(const TensorView& src, const TensorView& dst, cudaStream_t stream) {
  constexpr const char* api = "cuda::copy";
  check_device(api, on_gpu(api, "dst", dst), "src", src);
  check_rank(api, "src", src);
  check_rank(api, "dst", dst);
  check_same_shape(api, "src", src, "dst", dst);
  const std::int64_t n = src.numel();
  if (n == 0) return;
  const DeviceScope scope(dst.device);
  copy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(strided(src), strided(dst), n);
  check_launch(api);
}

void index_copy(const TensorView& src, const TensorView& dst, int dim, const std::int64_t* index,
                bool scatter, bool accumulate, cudaStream_t stream) {
  constexpr const char* api = "cuda::index_copy";
  check_device(api, on_gpu(api, "dst", dst), "src", src);
  check_rank(api, "src", src);
  check_rank(api, "dst", dst);
  BURST_CHECK(src.dtype == dst.dtype && src.ndim == dst.ndim && dim >= 0 && dim < src.ndim, InvalidArgument,
              api, ": along dim ", dim, " from ", src.describe(), " to ", dst.describe());
  for (int i = 0; i < src.ndim; ++i)
    BURST_CHECK(i == dim || src.size(i) == dst.size(i), InvalidArgument, api, ": shapes differ off dim ", dim,
                ": ", src.describe(), " vs ", dst.describe());
  if (accumulate) check_f32(api, "dst", dst);
  BURST_CHECK(index != nullptr, InvalidArgument, api, ": no index (a plain copy is cuda::copy)");
  const std::int64_t n = (scatter ? src : dst).numel();
  if (n == 0) return;
  const DeviceScope scope(dst.device);
  index_copy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(strided(src), strided(dst), dim, index, scatter,
                                                            accumulate,
                                                            static_cast<int>(dtype_size(src.dtype)), n);
  check_launch(api);
}

void fill(const TensorView& dst, float value, cudaStream_t stream) {
  constexpr const char* api = "cuda::fill";
  on_gpu(api, "dst", dst);
  check_rank(api, "dst", dst);
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  const DeviceScope scope(dst.device);
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(strided(dst), value, n);
  check_launch(api);
}

void add(const TensorView& dst, const TensorView& src, cudaStream_t stream) {
  constexpr const char* api = "cuda::add";
  check_device(api, on_gpu(api, "dst", dst), "src", src);
  check_rank(api, "dst", dst);
  check_rank(api, "src", src);
  check_same_shape(api, "dst", dst, "src", src);
  check_f32(api, "dst", dst);
  BURST_CHECK(src.dtype != DType::F64, Unsupported, api, ": src is f64; f32, bf16 or f16 expected");
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  const DeviceScope scope(dst.device);
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(strided(dst), strided(src), n);
  check_launch(api);
}

void merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                   const TensorView& lse_part, cudaStream_t stream) {
  constexpr const char* api = "cuda::merge_forward";
  check_device(api, on_gpu(api, "out", out), "lse", lse, "out_part", out_part, "lse_part", lse_part);
  for (const auto& [name, t] :
       {std::pair{"out", out}, {"lse", lse}, {"out_part", out_part}, {"lse_part", lse_part}}) {
    check_f32(api, name, t);
    check_rank(api, name, t);
  }
  for (const auto& [o, l, o_name, l_name] :
       {std::tuple{out, lse, "out", "lse"}, std::tuple{out_part, lse_part, "out_part", "lse_part"}}) {
    BURST_CHECK(o.ndim == 4 && l.ndim == 3, InvalidArgument, api, ": ", o_name, " must be [B,S,H,D] and ",
                l_name, " [B,H,S], got ", o.describe(), " and ", l.describe());
    BURST_CHECK(o.stride[3] == 1 || o.shape[3] <= 1, InvalidArgument, api, ": ", o_name,
                " must have D contiguous (stride 1), got ", o.describe());
    BURST_CHECK(l.shape[0] == o.shape[0] && l.shape[1] == o.shape[2] && l.shape[2] == o.shape[1],
                InvalidArgument, api, ": ", l_name, " ", l.describe(), " does not match [B,H,S] of ", o_name,
                " ", o.describe());
  }
  check_same_shape(api, "out", out, "out_part", out_part);
  const std::int64_t rows = out.shape[0] * out.shape[1] * out.shape[2];
  if (rows == 0) return;
  const DeviceScope scope(out.device);
  merge_kernel<<<blocks_for(rows * 32), kThreads, 0, stream>>>(strided(out), strided(lse), strided(out_part),
                                                               strided(lse_part));
  check_launch(api);
}

void attention_delta(const TensorView& dout, const TensorView& out, const TensorView& delta,
                     cudaStream_t stream) {
  constexpr const char* api = "cuda::attention_delta";
  check_device(api, on_gpu(api, "out", out), "dout", dout, "delta", delta);
  BURST_CHECK(out.ndim == 3 || out.ndim == 4, InvalidArgument, api,
              ": out must be [B,S,H,D] or [T,H,D], got ", out.describe());
  check_rank(api, "out", out);
  check_rank(api, "dout", dout);
  check_rank(api, "delta", delta);
  check_same_shape(api, "dout", dout, "out", out);
  for (const auto& [name, t] : {std::pair{"out", out}, {"dout", dout}}) {
    BURST_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16, Unsupported, api,
                ": ", name, " has dtype ", to_string(t.dtype), "; f32, bf16 or f16 expected");
    BURST_CHECK(t.stride[static_cast<std::size_t>(t.ndim - 1)] == 1 ||
                    t.shape[static_cast<std::size_t>(t.ndim - 1)] <= 1,
                InvalidArgument, api, ": ", name, " must have D contiguous (last stride 1), got ",
                t.describe());
  }
  check_f32(api, "delta", delta);
  const TensorView o = as_bshd(out), g = as_bshd(dout), r = as_rows(delta);
  BURST_CHECK(r.ndim == 3 && r.shape[0] == o.shape[0] && r.shape[1] == o.shape[2] && r.shape[2] == o.shape[1],
              InvalidArgument, api, ": delta ", delta.describe(), " must be [B,H,S] ([H,T] varlen) of out ",
              out.describe());
  const std::int64_t rows = o.shape[0] * o.shape[1] * o.shape[2];
  if (rows == 0) return;
  const DeviceScope scope(out.device);
  delta_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(strided(g), strided(o), strided(r));
  check_launch(api);
}

void synthesize_out(const TensorView& dout, const TensorView& delta, const TensorView& out,
                    cudaStream_t stream) {
  constexpr const char* api = "cuda::synthesize_out";
  check_device(api, on_gpu(api, "out", out), "dout", dout, "delta", delta);
  for (const auto& [name, t] : {std::pair{"out", out}, {"dout", dout}}) {
    BURST_CHECK(t.ndim == 4 && (t.stride[3] == 1 || t.shape[3] <= 1), InvalidArgument, api, ": ", name,
                " must be [B,S,H,D] with D contiguous, got ", t.describe());
    BURST_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16, Unsupported, api,
                ": ", name, " has dtype ", to_string(t.dtype), "; f32, bf16 or f16 expected");
  }
  check_same_shape(api, "dout", dout, "out", out);
  check_f32(api, "delta", delta);
  BURST_CHECK(delta.ndim == 3 && delta.shape[0] == out.shape[0] && delta.shape[1] == out.shape[2] &&
                  delta.shape[2] == out.shape[1],
              InvalidArgument, api, ": delta ", delta.describe(), " must be [B,H,S] of out ", out.describe());
  const std::int64_t rows = out.shape[0] * out.shape[1] * out.shape[2];
  if (rows == 0) return;
  const DeviceScope scope(out.device);
  synth_out_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(strided(dout), strided(delta), strided(out));
  check_launch(api);
}

void first_nonfinite(const TensorView& t, std::int64_t* first, cudaStream_t stream) {
  constexpr const char* api = "cuda::first_nonfinite";
  on_gpu(api, "t", t);
  check_rank(api, "t", t);
  BURST_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16, Unsupported, api,
              ": t is ", to_string(t.dtype), "; f32, bf16 or f16 expected");
  BURST_CHECK(first != nullptr, InvalidArgument, api, ": no result word");
  const DeviceScope scope(t.device);
  check(cudaMemsetAsync(first, 0xFF, sizeof(std::int64_t), stream), api);  // −1: none found
  const std::int64_t n = t.numel();
  if (n == 0) return;
  first_nonfinite_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      strided(t), n, reinterpret_cast<unsigned long long*>(first));
  check_launch(api);
}

}  // namespace burst::cuda
