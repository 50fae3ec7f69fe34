// The device seam's staging under mpiexec -n 1..4 (src/strategies/staging.h, ring_skeleton.h):
// a host-memory stand-in device that behaves like a separate one — its "device" blocks are
// allocations apart from the wire buffers, so every staging copy is real, and it counts them —
// runs the ring executor beside the CPU device on the same payloads and compute.
// - Results: the stand-in's result equals the CPU device's bit for bit (the staging copies are
//   exact and the sums keep their order), forward (no write ring) and backward (write ring,
//   split own block), fp32 and bf16 write wires.
// - Copies: a received message is copied in once (bytes in = every byte the plan says this
//   rank receives: over the ranks, the plan's bytes sent); a message this rank originates is
//   copied out once and a forwarded one not at all (bytes out = the plan's bytes sent by this
//   rank minus the P − 2 forwarded read payloads). A staging that copied a forwarded payload
//   again, or skipped one, fails.
// - The device seam's CPU ops against plain loops: strided copy, gather / scatter(-add), fill,
//   add of bf16, rounding to bf16.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "burst/comm.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "device/cpu/cpu_device.h"
#include "strategies/ring_skeleton.h"
#include "wire_layout.h"

namespace burst {
namespace {

/// Host memory posing as a separate device: Device blocks are malloc'd apart from any
/// ByteBuffer (on_host() false), so staging must copy; copies and their bytes are counted.
class StandInDevice final : public device::CpuDevice {
 public:
  bool host_memory() const override { return false; }
  device::Buffer allocate(std::int64_t bytes, device::MemoryKind kind) const override {
    if (kind == device::MemoryKind::PinnedHost) return CpuDevice::allocate(bytes, kind);
    void* p = std::aligned_alloc(64, static_cast<std::size_t>((bytes + 63) / 64 * 64 + 64));
    return device::Buffer(
        p, bytes, [](const void*, void* data, std::int64_t) { std::free(data); }, this);
  }
  void copy_to_host(const std::byte* src, std::byte* dst, std::int64_t bytes) const override {
    ++to_host;
    bytes_to_host += bytes;
    CpuDevice::copy_to_host(src, dst, bytes);
  }
  void copy_from_host(const std::byte* src, std::byte* dst, std::int64_t bytes) const override {
    ++from_host;
    bytes_from_host += bytes;
    CpuDevice::copy_from_host(src, dst, bytes);
  }
  mutable std::int64_t to_host = 0, from_host = 0, bytes_to_host = 0, bytes_from_host = 0;
};

/// Runs the executor over `dev`: read payload of R bytes (byte i = (rank·31 + i) mod 251), write
/// accumulator of W floats; step compute adds a value of (step, partition, payload) into every
/// write float (both halves under split_own). Returns the result's fp32 values.
std::vector<float> run_ring(const Communicator& world, const device::Device& dev, std::int64_t R,
                            std::int64_t W, DType wire) {
  strategies::RingExecutor exec(world, dev, 1, world.size(), true, wire);
  device::Buffer own = exec.pool().get(R);
  std::vector<std::byte> host(static_cast<std::size_t>(R));
  for (std::int64_t i = 0; i < R; ++i)
    host[static_cast<std::size_t>(i)] = static_cast<std::byte>((world.rank() * 31 + i) % 251);
  std::memcpy(own.data(), host.data(), static_cast<std::size_t>(R));  // test-side: host memory, not counted
  strategies::RingRunStats rs;
  device::Buffer out = exec.run(
      std::move(own), W,
      [&](int, int j, const std::byte* read, float* write, const std::function<void()>&,
          strategies::RowSlice slice) {
        if (!write) return;
        const std::int64_t a = slice.begin(W), e = slice.end(W);
        for (std::int64_t i = a; i < e; ++i)
          write[i] += static_cast<float>(std::to_integer<int>(read[i % R])) * 0.37f + static_cast<float>(j);
      },
      rs, W > 0);
  std::vector<float> values(static_cast<std::size_t>(W));
  if (W > 0) std::memcpy(values.data(), out.data(), static_cast<std::size_t>(4 * W));
  return values;
}

TEST(DeviceStaging, CopiesAreThePlansAndResultsBitwiseTheCpuPaths) {
  const Communicator world = Communicator::world();
  const int P = world.size(), g = world.rank();
  const ProblemShape shape{1, 16 * P, 2, 2, 8, DType::F32};
  const std::int64_t S = shape.S_global / P, q_numel = S * shape.H * shape.D;
  const std::int64_t R_fwd = wire::kv_block(DType::F32, S * shape.H_kv * shape.D).bytes();
  const std::int64_t R_bwd = wire::query_block(DType::F32, q_numel, S * shape.H).bytes();
  const auto plan_sent = [&](const PassPlan& pass, int r) {
    return pass.bytes_sent[static_cast<std::size_t>(r)];
  };
  for (const DType wire_dtype : {DType::F32, DType::BF16}) {
    for (const bool backward : {false, true}) {
      if (!backward && wire_dtype == DType::BF16) continue;
      const std::int64_t R = backward ? R_bwd : R_fwd, W = backward ? q_numel : 0;
      const device::CpuDevice cpu;
      const StandInDevice standin;
      const std::vector<float> want = run_ring(world, cpu, R, W, wire_dtype);
      const std::vector<float> got = run_ring(world, standin, R, W, wire_dtype);
      ASSERT_EQ(want.size(), got.size());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), 4 * want.size()))
          << "P=" << P << " backward=" << backward;
      DistConfig cfg;
      cfg.strategy = StrategyKind::Burst;
      cfg.backward_side = BackwardSide::QuerySide;
      cfg.partials_dtype = wire_dtype;
      const Plan plan = Plan::make(cfg, shape, Mask::full(), P, P);  // one node: the flat ring
      const PassPlan& pass = backward ? plan.backward() : plan.forward();
      const std::int64_t sent = plan_sent(pass, g);
      std::int64_t sent_all = 0;
      for (int r = 0; r < P; ++r) sent_all += plan_sent(pass, r);
      EXPECT_EQ(world.all_reduce_sum(standin.bytes_from_host), sent_all)
          << "every byte sent is staged in once (P=" << P << ", backward=" << backward << ")";
      // Read payloads sent: P − 1, the first staged out, the others forwarded from their wire.
      EXPECT_EQ(standin.bytes_to_host, sent - (P - 2) * R)
          << "own payload once, partials once, forwarded payloads never (P=" << P << ", backward=" << backward
          << ")";
      // Messages: received ones are copied in once each (P − 1 read payloads, plus the write ring's
      // chain and home partials on the backward).
      const std::int64_t write_in = backward && P > 1 ? P - 1 + 1 : 0;
      EXPECT_EQ(standin.from_host, (P - 1) + write_in) << "P=" << P << " backward=" << backward;
    }
  }
}

/// The CPU device's copies against plain index loops on a strided [2, 5, 3, 4] view (element
/// (a, b, c, d) at a·100 + b·16 + c·5 + d, padding between rows and heads).
TEST(CpuDevice, CopiesGathersScattersFillsAddsAndRoundsAsPlainLoops) {
  const device::CpuDevice dev;
  std::vector<float> big(200 + 16 * 5);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f - 7.0f;
  TensorView strided = make_view(big.data(), {2, 5, 3, 4});
  strided.stride = {100, 16, 5, 1};
  auto at = [&](std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
    return big[static_cast<std::size_t>(a * 100 + b * 16 + c * 5 + d)];
  };
  std::vector<float> packed(120);
  dev.copy(strided, make_view(packed.data(), {2, 5, 3, 4}));
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t b = 0; b < 5; ++b)
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t d = 0; d < 4; ++d)
          ASSERT_EQ(packed[static_cast<std::size_t>(((a * 5 + b) * 3 + c) * 4 + d)], at(a, b, c, d));
  const std::vector<std::int64_t> rows = {4, 0, 2};
  std::vector<float> gathered(2 * 3 * 3 * 4);
  dev.index_copy(strided, make_view(gathered.data(), {2, 3, 3, 4}), 1, rows.data(), false, false);
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t d = 0; d < 4; ++d)
          ASSERT_EQ(gathered[static_cast<std::size_t>(((a * 3 + i) * 3 + c) * 4 + d)],
                    at(a, rows[static_cast<std::size_t>(i)], c, d));
  std::vector<float> acc(120, 1.0f);
  dev.index_copy(make_view(gathered.data(), {2, 3, 3, 4}), make_view(acc.data(), {2, 5, 3, 4}), 1,
                 rows.data(), true, true);  // scatter-add back
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t b = 0; b < 5; ++b)
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t d = 0; d < 4; ++d) {
          const bool hit = b == 4 || b == 0 || b == 2;
          ASSERT_EQ(acc[static_cast<std::size_t>(((a * 5 + b) * 3 + c) * 4 + d)],
                    hit ? 1.0f + at(a, b, c, d) : 1.0f);
        }
  std::vector<float> inner(2 * 5 * 3 * 2);  // gather along the innermost dim, element by element
  const std::vector<std::int64_t> cols = {3, 1};
  dev.index_copy(strided, make_view(inner.data(), {2, 5, 3, 2}), 3, cols.data(), false, false);
  EXPECT_EQ(inner[1], at(0, 0, 0, 1));
  EXPECT_EQ(inner[static_cast<std::size_t>(((1 * 5 + 4) * 3 + 2) * 2)], at(1, 4, 2, 3));
  std::vector<std::uint16_t> h(120);
  const TensorView hv = make_view(h.data(), DType::BF16, {2, 5, 3, 4});
  dev.convert(strided, hv);
  std::vector<float> sum(120, 0.25f);
  dev.add(hv, make_view(sum.data(), {2, 5, 3, 4}));
  for (std::size_t i = 0; i < 120; ++i) {
    ASSERT_EQ(h[i], bf16_from_float(packed[i]));
    ASSERT_EQ(sum[i], 0.25f + bf16_to_float(h[i]));
  }
  dev.fill(strided, -2.0f);
  EXPECT_EQ(at(1, 4, 2, 3), -2.0f);
  EXPECT_EQ(big[4], -5.0f);  // padding between heads (c stride 5, d < 4) untouched
}

}  // namespace
}  // namespace burst
