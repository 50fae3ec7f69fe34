// The device seam on a GPU (src/device/cuda/cuda_device.h) against the CPU device, the oracle:
// the same operations through device::Device on the same data give the same bytes (merge: up
// to the device's expf / log1pf, tested in test_cuda_elementwise). CudaDevice.* need a GPU and
// report SKIPPED with the driver's reason without one (the binary then exits 77: ctest counts
// it as skipped); CudaDeviceChecks.* run everywhere. OnGpu.* is the GPU part.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "burst/error.h"
#include "burst/tensor.h"
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

class OnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const cuda::DeviceQuery q = cuda::query_devices();
    if (q.count == 0) GTEST_SKIP() << "no CUDA device: " << q.reason;
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
            dev->index_copy(small, full, dim, perm.data(), true, accumulate);
          else
            dev->index_copy(full, small, dim, perm.data(), false, accumulate);
          got[side++] = download(*dev, scatter ? bx : bs);
        }
        EXPECT_TRUE(got[0] == got[1])
            << "dim " << dim << " scatter " << scatter << " accumulate " << accumulate;
      }
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

// Exit 77 (ctest: skipped) when every test that ran was skipped: no GPU here.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  if (rc == 0 && u.skipped_test_count() > 0 && u.successful_test_count() == 0) return 77;
  return rc;
}
