// The device seam on a GPU (src/device/cuda/cuda_device.h) against the CPU device, the oracle:
// the same operations through device::Device on the same data give the same bytes (merge: up
// to the device's expf / log1pf, tested in test_cuda_elementwise). CudaDevice.* need a GPU and
// report SKIPPED with the driver's reason without one (the binary then exits 77: ctest counts
// it as skipped); CudaDeviceChecks.* run everywhere. OnGpu.* is the GPU part.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "burst/comm.h"
#include "burst/error.h"
#include "burst/tensor.h"
#include "cuda_test_util.h"
#include "device/cuda/attention_cudnn.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_memory.h"

namespace burst::device {
namespace {

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

/// A buffer of the device holding `host`'s bytes (uploaded through the seam's staging copy).
Buffer upload(const Device& dev, const void* host, std::int64_t bytes) {
  Buffer b = dev.allocate(bytes, MemoryKind::Device);
  dev.copy_from_host(static_cast<const std::byte*>(host), b.data(), bytes);
  return b;
}
std::vector<unsigned char> download(const Device& dev, const Buffer& b) {
  std::vector<unsigned char> out(static_cast<std::size_t>(b.size()));
  dev.copy_to_host(b.data(), reinterpret_cast<std::byte*>(out.data()), b.size());
  dev.wait(dev.record());
  return out;
}

/// A view of `shape` over a buffer with the given strides (elements).
TensorView view_over(const Buffer& b, DType dtype, std::vector<std::int64_t> shape,
                     std::vector<std::int64_t> stride) {
  TensorView v = make_view(static_cast<const void*>(b.data()), dtype, shape);
  for (std::size_t i = 0; i < stride.size(); ++i) v.stride[i] = stride[i];
  return v;
}

class OnGpu : public test::OnCudaDevice {
 protected:
  void SetUp() override {
    OnCudaDevice::SetUp();
    if (IsSkipped()) return;
    gpu = std::make_unique<CudaDevice>(0);
  }
  std::unique_ptr<CudaDevice> gpu;
  std::shared_ptr<const Device> cpu = make_cpu_device();
};
TEST_F(OnGpu, ConvertCopyFillAddGiveTheCpuDevicesBytes) {
  const std::int64_t B = 2, S = 33, H = 3, D = 40;
  const std::int64_t n = B * S * H * D;
  const auto x = random_floats(static_cast<std::size_t>(n), 1),
             y = random_floats(static_cast<std::size_t>(n), 2);
  const std::vector<std::int64_t> shape{B, S, H, D}, permuted{S * H * D, D, S * D, 1};  // SDPA memory
  std::vector<std::vector<unsigned char>> results[2];
  int side = 0;
  for (const Device* dev : {static_cast<const Device*>(gpu.get()), cpu.get()}) {
    Buffer bx = upload(*dev, x.data(), 4 * n), by = upload(*dev, y.data(), 4 * n);
    Buffer b16 = dev->allocate(2 * n, MemoryKind::Device), bz = dev->allocate(4 * n, MemoryKind::Device);
    const TensorView vx = view_over(bx, DType::F32, shape, permuted),
                     vy = view_over(by, DType::F32, shape, {});
    const TensorView v16 = view_over(b16, DType::BF16, shape, {}),
                     vz = view_over(bz, DType::F32, shape, permuted);
    dev->convert(vx, v16);  // round to the wire dtype
    dev->fill(vz, 0.5f);
    dev->add(v16, vz);  // widen and accumulate
    dev->add(vy, vz);
    dev->copy(vz, vy);
    results[side].push_back(download(*dev, b16));
    results[side].push_back(download(*dev, bz));
    results[side].push_back(download(*dev, by));
    ++side;
  }
  for (std::size_t i = 0; i < results[0].size(); ++i)
    EXPECT_TRUE(results[0][i] == results[1][i]) << "result " << i;
}

TEST_F(OnGpu, IndexCopyGathersScattersAndAccumulatesAsTheCpuDevice) {
  const std::int64_t A = 3, N = 9, C = 9;
  const auto x = random_floats(static_cast<std::size_t>(A * N * C), 3);
  const std::vector<std::int64_t> perm{4, 0, 8, 2, 6};  // 5 of the 9 rows
  for (int dim : {1, 2})
    for (bool scatter : {false, true})
      for (bool accumulate : {false, true}) {
        std::vector<unsigned char> got[2];
        int side = 0;
        for (const Device* dev : {static_cast<const Device*>(gpu.get()), cpu.get()}) {
          Buffer bx = upload(*dev, x.data(), 4 * A * N * C);
          const TensorView full = view_over(bx, DType::F32, {A, N, C}, {});
          std::vector<std::int64_t> small_shape{A, N, C};
          small_shape[static_cast<std::size_t>(dim)] = 5;
          Buffer bs = upload(*dev, x.data(), 4 * A * N * C);
          const TensorView small = view_over(bs, DType::F32, small_shape, {});
          if (scatter)
            dev->index_copy(small, full, dim, perm.data(), nullptr, true, accumulate);
          else
            dev->index_copy(full, small, dim, perm.data(), nullptr, false, accumulate);
          got[side++] = download(*dev, scatter ? bx : bs);
        }
        EXPECT_TRUE(got[0] == got[1])
            << "dim " << dim << " scatter " << scatter << " accumulate " << accumulate;
      }
}

/// With a twin (the table in the GPU's memory, uploaded once by the caller: the strategies'
/// Ulysses rows) the kernel reads the twin, not a per-call copy of the host table: a twin
/// holding another permutation gives that permutation's result (the CPU device's bytes for it),
/// and the host table is still the one checked against the bounds.
TEST_F(OnGpu, IndexCopyReadsTheCallersTwinOfTheTable) {
  const std::int64_t A = 3, N = 9, C = 9;
  const auto x = random_floats(static_cast<std::size_t>(A * N * C), 4);
  const std::vector<std::int64_t> host{4, 0, 8, 2, 6}, other{1, 3, 5, 7, 0};
  const Buffer twin =
      upload(*gpu, other.data(), static_cast<std::int64_t>(other.size() * sizeof(std::int64_t)));
  const auto* twin_data = static_cast<const std::int64_t*>(static_cast<const void*>(twin.data()));
  for (bool scatter : {false, true}) {
    std::vector<unsigned char> got[2];
    int side = 0;
    for (const Device* dev : {static_cast<const Device*>(gpu.get()), cpu.get()}) {
      Buffer bx = upload(*dev, x.data(), 4 * A * N * C), bs = upload(*dev, x.data(), 4 * A * 5 * C);
      const TensorView full = view_over(bx, DType::F32, {A, N, C}, {}),
                       small = view_over(bs, DType::F32, {A, 5, C}, {});
      const bool on_gpu = dev == gpu.get();
      const std::int64_t* index = on_gpu ? host.data() : other.data();  // the CPU reads `other` itself
      if (scatter)
        dev->index_copy(small, full, 1, index, on_gpu ? twin_data : nullptr, true, false);
      else
        dev->index_copy(full, small, 1, index, on_gpu ? twin_data : nullptr, false, false);
      got[side++] = download(*dev, scatter ? bx : bs);
    }
    EXPECT_TRUE(got[0] == got[1]) << "scatter " << scatter;
  }
  const std::vector<std::int64_t> outside{4, 0, 9, 2, 6};  // 9: past the 9 rows
  Buffer bx = upload(*gpu, x.data(), 4 * A * N * C), bs = upload(*gpu, x.data(), 4 * A * 5 * C);
  EXPECT_THROW(
      gpu->index_copy(view_over(bx, DType::F32, {A, N, C}, {}), view_over(bs, DType::F32, {A, 5, C}, {}), 1,
                      outside.data(), twin_data, false, false),
      Error);
}

/// One launch per call (cuda::index_copy) against the CPU device's loops: every dim of a strided
/// 4-D view (the innermost too), f32 and bf16 (bit moves), gather, scatter and scatter-add, with
/// and without an index, over walked sizes 1, 4 and 7 (a padded view: elements between rows stay).
TEST_F(OnGpu, IndexCopyInOneLaunchMatchesTheCpuDeviceOnEveryDimAndDtype) {
  const std::vector<std::int64_t> full{3, 7, 5, 6}, stride{7 * 5 * 8, 5 * 8, 8, 1};  // rows padded to 8
  const std::int64_t big = 3 * 7 * 5 * 8;
  const auto x = random_floats(static_cast<std::size_t>(big), 7),
             x2 = random_floats(static_cast<std::size_t>(2 * big), 9);
  std::vector<std::uint16_t> h(x2.size());  // bf16 values (no NaN bit patterns) in the same bytes
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = bf16_from_float(x2[i]);
  int cases = 0;
  for (DType dtype : {DType::F32, DType::BF16})
    for (int dim = 0; dim < 4; ++dim)
      for (std::int64_t n : {std::int64_t{1}, std::int64_t{4}, full[static_cast<std::size_t>(dim)]})
        for (bool scatter : {false, true})
          for (bool accumulate : {false, true})
            for (bool with_index : {true, false}) {
              if (accumulate && dtype != DType::F32) continue;
              const std::int64_t len = full[static_cast<std::size_t>(dim)];
              if (n > len || (!with_index && n != len)) continue;
              std::vector<std::int64_t> index;  // distinct, out of order: len−1, len−3, ... then the evens
              for (std::int64_t i = len - 1; i >= 0 && static_cast<std::int64_t>(index.size()) < n; i -= 2)
                index.push_back(i);
              for (std::int64_t i = len % 2; static_cast<std::int64_t>(index.size()) < n; i += 2)
                index.push_back(i);
              std::vector<std::int64_t> part_shape = full;
              part_shape[static_cast<std::size_t>(dim)] = n;
              std::vector<unsigned char> got[2];
              int side = 0;
              for (const Device* dev : {static_cast<const Device*>(gpu.get()), cpu.get()}) {
                const auto* bytes =
                    dtype == DType::F32
                        ? static_cast<const unsigned char*>(static_cast<const void*>(x.data()))
                        : static_cast<const unsigned char*>(static_cast<const void*>(h.data()));
                Buffer bf = upload(*dev, bytes, 4 * big), bp = upload(*dev, bytes + 20, 4 * (big - 8));
                const TensorView vf = view_over(bf, dtype, full, stride);
                const TensorView vp = view_over(bp, dtype, part_shape, {});
                const std::int64_t* ix = with_index ? index.data() : nullptr;
                if (scatter)
                  dev->index_copy(vp, vf, dim, ix, nullptr, true, accumulate);
                else
                  dev->index_copy(vf, vp, dim, ix, nullptr, false, accumulate);
                got[side++] = download(*dev, scatter ? bf : bp);
              }
              EXPECT_TRUE(got[0] == got[1])
                  << to_string(dtype) << " dim " << dim << " n " << n << " scatter " << scatter
                  << " accumulate " << accumulate << " index " << with_index;
              ++cases;
            }
  EXPECT_GT(cases, 60);
}

/// Wire buffers from a pinned pool are page-locked host memory (cudaHostRegister): staging into
/// them is an asynchronous copy that is complete after the event, with the CPU's bytes; the
/// device releases the registration (release_pinned) and tolerates bytes it never pinned.
TEST_F(OnGpu, PinnedWireBuffersArePageLockedAndReleased) {
  const auto x = random_floats(1000, 8);
  Buffer b = upload(*gpu, x.data(), 4 * 1000);
  BufferPool wires(*gpu, MemoryKind::PinnedHost);
  ByteBuffer wire = wires.get_host(4 * 1000);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, wire.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "a pinned wire buffer is not page-locked";
  gpu->copy_to_host(b.data(), wire.data(), 4 * 1000);
  gpu->wait(gpu->record());
  EXPECT_EQ(std::memcmp(wire.data(), x.data(), wire.size()), 0);
  wires.put_host(std::move(wire));
  Buffer direct = gpu->allocate(1 << 20, MemoryKind::PinnedHost);  // pages of its own (mmap)
  ByteBuffer own = direct.to_host();
  ASSERT_EQ(cudaPointerGetAttributes(&attr, own.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  gpu->release_pinned(own);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, own.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered) << "release_pinned left the range registered";
  ByteBuffer never(64);
  gpu->release_pinned(never);  // never pinned: nothing to undo, no error left behind
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(OnGpu, EventsStagingFingerprintAndPool) {
  const auto x = random_floats(4096, 4);
  Buffer b = upload(*gpu, x.data(), 4 * 4096);
  const Event e = gpu->record();
  gpu->wait(e);
  auto back = download(*gpu, b);
  EXPECT_EQ(std::memcmp(back.data(), x.data(), back.size()), 0);
  // The same contents give the CPU's fingerprint, whatever the strides.
  const TensorView strided = view_over(b, DType::F32, {16, 8}, {256, 2});
  std::vector<float> host_copy(128);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j)
      host_copy[static_cast<std::size_t>(i * 8 + j)] = x[static_cast<std::size_t>(i * 256 + j * 2)];
  EXPECT_EQ(gpu->fingerprint({strided}), cpu->fingerprint({make_view(host_copy.data(), {16, 8})}));
  BufferPool pool(*gpu);
  Buffer z = pool.get_zeroed(4 * 1000);
  const auto zeros = download(*gpu, z);
  EXPECT_EQ(std::vector<unsigned char>(zeros.size(), 0), zeros);
  pool.put(std::move(z));
  EXPECT_EQ(pool.kept_bytes(), 4 * 1000);
  EXPECT_EQ(gpu->name(), "cuda:0");
  EXPECT_FALSE(gpu->host_memory());
}

// The ring's forward is cut into shaped steps only where cuDNN may take them: with cuDNN built in
// and the kernel choice Auto or Cudnn; forced onto the own kernels, a cut would only add launches.
TEST_F(OnGpu, StepsAreShapedOnlyWhereCudnnMayTakeThem) {
  EXPECT_EQ(gpu->prefers_shaped_steps(), cuda::cudnn_compiled());  // Auto
  for (const cuda::StepKernel k : {cuda::StepKernel::Cudnn, cuda::StepKernel::Fast, cuda::StepKernel::FastMma,
                                   cuda::StepKernel::Reference}) {
    CudaDevice::Options o;
    o.kernel = k;
    const CudaDevice d(0, o);
    EXPECT_EQ(d.prefers_shaped_steps(), k == cuda::StepKernel::Cudnn && cuda::cudnn_compiled())
        << static_cast<int>(k);
  }
}

// The first NaN / infinity of a padded 4-dim view, fp32 and bf16: the CPU device's answer on the
// same bytes (a NaN in the padding is not seen; the first of two is reported; none: -1).
TEST_F(OnGpu, FirstNonfiniteIsTheCpuDevicesAnswer) {
  auto x = random_floats(2 * 5 * 3 * 8, 6);  // [2,5,3,4] with D padded to 8
  const std::vector<std::int64_t> shape{2, 5, 3, 4}, stride{120, 24, 8, 1};
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      x[1 * 120 + 2 * 24 + 1 * 8 + 3] = -INFINITY;  // (1, 2, 1, 3)
      x[1 * 120 + 4 * 24] = NAN;                    // (1, 4, 0, 0): later
      x[5] = NAN;                                   // padding of (0, 0, 0)
    }
    for (const DType dtype : {DType::F32, DType::BF16}) {
      std::vector<std::uint16_t> h;
      for (const float f : x) h.push_back(bf16_from_float(f));
      const void* host = dtype == DType::F32 ? static_cast<const void*>(x.data()) : h.data();
      const std::int64_t bytes = static_cast<std::int64_t>(x.size() * dtype_size(dtype));
      const Buffer b = upload(*gpu, host, bytes);
      TensorView on_host = make_view(host, dtype, shape);
      for (std::size_t i = 0; i < 4; ++i) on_host.stride[i] = stride[i];
      const std::int64_t want = cpu->first_nonfinite(on_host);
      EXPECT_EQ(gpu->first_nonfinite(view_over(b, dtype, shape, stride)), want) << to_string(dtype);
      EXPECT_EQ(want, pass == 0 ? -1 : ((1 * 5 + 2) * 3 + 1) * 4 + 3) << to_string(dtype);
    }
  }
}

// The GPU's reduction (cuda::first_nonfinite through the seam) against the CPU device's scan on
// the same bytes: fp32, bf16 and f16, SDPA-ordered memory with padded rows (NaN in the padding
// is never seen), a NaN, +inf or -inf planted at the first, a middle and the last element or
// nowhere, two planted (the earlier wins, also when it lies in a later block of the launch),
// and a view of 1.2M elements (many blocks, grid-stride).
TEST_F(OnGpu, FirstNonfiniteFindsTheFirstEverywhereAsTheCpuDevice) {
  for (const std::int64_t S : {std::int64_t{7}, std::int64_t{3000}}) {
    const std::int64_t B = 2, H = 5, D = 40, Dp = 48, n = B * S * H * D;
    const std::vector<std::int64_t> shape{B, S, H, D}, stride{H * S * Dp, Dp, S * Dp, 1};
    const auto at = [&](std::int64_t e) {  // memory offset of the e-th element in row-major order
      const std::int64_t d = e % D, h = e / D % H, s = e / (D * H) % S, b = e / (D * H * S);
      return static_cast<std::size_t>(b * stride[0] + s * stride[1] + h * stride[2] + d);
    };
    const auto base = random_floats(static_cast<std::size_t>(B * H * S * Dp), 11);
    const std::vector<std::vector<std::int64_t>> plants = {{}, {0}, {n / 2}, {n - 1}, {2 * n / 3, n / 3}};
    for (const DType dtype : {DType::F32, DType::BF16, DType::F16})
      for (std::size_t c = 0; c < plants.size(); ++c)
        for (const float bad : {NAN, INFINITY, -INFINITY}) {
          std::vector<float> x = base;
          for (std::int64_t s = 0; s < S; ++s)
            x[at(s * H * D) + static_cast<std::size_t>(D)] = NAN;  // padding
          for (const std::int64_t e : plants[c]) x[at(e)] = bad;
          std::vector<std::uint16_t> h;
          for (const float f : x) h.push_back(dtype == DType::BF16 ? bf16_from_float(f) : f16_from_float(f));
          const void* host = dtype == DType::F32 ? static_cast<const void*>(x.data()) : h.data();
          const Buffer b = upload(*gpu, host, static_cast<std::int64_t>(x.size() * dtype_size(dtype)));
          TensorView on_host = make_view(host, dtype, shape);
          for (std::size_t i = 0; i < 4; ++i) on_host.stride[i] = stride[i];
          const std::int64_t want = cpu->first_nonfinite(on_host);
          const std::int64_t expected =
              plants[c].empty() ? -1 : *std::min_element(plants[c].begin(), plants[c].end());
          EXPECT_EQ(want, expected) << "the CPU twin itself, " << to_string(dtype) << " case " << c;
          EXPECT_EQ(gpu->first_nonfinite(view_over(b, dtype, shape, stride)), want)
              << to_string(dtype) << " S " << S << " case " << c << " value " << bad;
        }
  }
}

TEST(CudaDeviceChecks, WithoutAGpuConstructionNamesTheReason) {
  const cuda::DeviceQuery q = cuda::query_devices();
  if (q.count > 0) GTEST_SKIP() << "a GPU is here";
  try {
    CudaDevice dev(0);
    FAIL() << "a CUDA device was made without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Internal);
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace burst::device

int main(int argc, char** argv) { return burst::test::run_cuda_tests(argc, argv); }
