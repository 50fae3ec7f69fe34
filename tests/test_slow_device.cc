// The emulated slow rank of `burst bench dist --emulate-slow-rank` (bench/slow_device.h): a
// decorator of the device seam that forwards every call to the CPU device and stretches each
// step kernel to F times its CPU time.
// - Same bits: forward (out, lse) and backward (dq, dk, dv, accumulating) through the decorator
//   equal the CPU device's bit for bit, causal on a zigzag rank's positions.
// - F times the time: the decorated call's thread CPU time against the plain call's (medians of
//   7 alternated calls) is within [0.75 F, 1.35 F] (a decorator that forgot to spin, or spun by
//   wall time while descheduled, fails), and its own accounting says spun = (F − 1) × kernel.
// - The spin polls the kernel's progress hook (the ring's transfers keep moving): more calls of
//   the hook at F = 3 than at F = 1.
// - Refusals: F < 1 or not finite, a device whose kernels are asynchronous, ranks out of range;
//   −1 names the last rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "bench/slow_device.h"
#include "burst/error.h"
#include "burst/isa.h"
#include "burst/mask.h"
#include "device/cpu/cpu_device.h"
#include "test_util.h"

namespace burst::bench {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.numel()) * sizeof(float)) == 0;
}

double thread_cpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Rank 0 of 2 in the zigzag layout of S tokens: chunks 0 and 3 of 4.
std::vector<std::int64_t> zigzag_rank0(std::int64_t S) {
  std::vector<std::int64_t> pos;
  for (std::int64_t i = 0; i < S / 4; ++i) pos.push_back(i);
  for (std::int64_t i = 3 * S / 4; i < S; ++i) pos.push_back(i);
  return pos;
}

struct Case {
  std::int64_t S, n, H = 2, D = 32;
  std::vector<std::int64_t> pos;
  ResolvedMask mask;
  Tensor q, k, v, dout;
  kernels::KernelParams p;
  explicit Case(std::int64_t S_)
      : S(S_),
        n(S_ / 2),
        pos(zigzag_rank0(S_)),
        mask(Mask::causal_mask(), S_, S_),
        q(test::random_tensor({1, S_ / 2, 2, 32}, 1)),
        k(test::random_tensor({1, S_ / 2, 2, 32}, 2)),
        v(test::random_tensor({1, S_ / 2, 2, 32}, 3)),
        dout(test::random_tensor({1, S_ / 2, 2, 32}, 4)) {
    p.mask = &mask;
    p.q_pos = p.kv_pos = pos.data();
    p.scale = 0.2f;
    p.isa = detect_isa();
  }
};

struct Results {
  Tensor out, lse, delta, dq, dk, dv;
};

Results run(const device::Device& dev, const Case& c) {
  Results r{Tensor({1, c.n, c.H, c.D}), Tensor({1, c.H, c.n}),      Tensor({1, c.H, c.n}),
            Tensor({1, c.n, c.H, c.D}), Tensor({1, c.n, c.H, c.D}), Tensor({1, c.n, c.H, c.D})};
  dev.step_forward(c.q.view(), c.k.view(), c.v.view(), r.out.view(), r.lse.view(), c.p);
  dev.attention_delta(c.dout.view(), r.out.view(), r.delta.view());
  for (Tensor* t : {&r.dq, &r.dk, &r.dv})
    for (float& x : t->vec()) x = 0.25f;  // accumulate onto something
  dev.step_backward(c.dout.view(), c.q.view(), c.k.view(), c.v.view(), r.lse.view(), r.delta.view(),
                    r.dq.view(), r.dk.view(), r.dv.view(), c.p, true);
  return r;
}

TEST(SlowDevice, SameBitsAsTheDeviceItWraps) {
  const Case c(512);
  const std::shared_ptr<const device::Device> cpu = device::make_cpu_device();
  const SlowDevice slow(cpu, 1.3);
  const Results a = run(*cpu, c), b = run(slow, c);
  EXPECT_GT(test::max_abs(a.dq), 0.25);  // the backward ran
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.lse, b.lse));
  EXPECT_TRUE(same_bits(a.dq, b.dq));
  EXPECT_TRUE(same_bits(a.dk, b.dk));
  EXPECT_TRUE(same_bits(a.dv, b.dv));
  EXPECT_GT(slow.kernel_seconds(), 0.0);
  EXPECT_EQ(slow.host_memory(), cpu->host_memory());
}

TEST(SlowDevice, SpendsFTimesTheKernelsTime) {
  constexpr double F = 2.0;
  const Case c(2048);
  const std::shared_ptr<const device::Device> cpu = device::make_cpu_device();
  const SlowDevice slow(cpu, F);
  const auto cpu_time = [&](const device::Device& dev) {
    Tensor out({1, c.n, c.H, c.D}), lse({1, c.H, c.n});
    const double t0 = thread_cpu();
    dev.step_forward(c.q.view(), c.k.view(), c.v.view(), out.view(), lse.view(), c.p);
    return thread_cpu() - t0;
  };
  cpu_time(*cpu);  // warm the workspace
  std::vector<double> plain, slowed;
  for (int i = 0; i < 7; ++i) {  // alternated: a change of the machine's load hits both
    plain.push_back(cpu_time(*cpu));
    slowed.push_back(cpu_time(slow));
  }
  const double ratio = median(slowed) / median(plain);
  EXPECT_GT(ratio, 0.75 * F) << "median " << median(slowed) << " s slowed, " << median(plain) << " s plain";
  EXPECT_LT(ratio, 1.35 * F) << "median " << median(slowed) << " s slowed, " << median(plain) << " s plain";
  // Its own accounting: the spin is (F − 1) × the kernel, to within the last clock read.
  EXPECT_GE(slow.spun_seconds(), (F - 1) * slow.kernel_seconds());
  EXPECT_LT(slow.spun_seconds(), (F - 1) * slow.kernel_seconds() * 1.02 + 5 * 1e-4);
}

TEST(SlowDevice, PollsTheProgressHookWhileItSpins) {
  const Case c(1024);
  const std::shared_ptr<const device::Device> cpu = device::make_cpu_device();
  const auto polls = [&](double F) {
    int n = 0;
    const std::function<void()> hook = [&] { ++n; };
    kernels::KernelParams p = c.p;
    p.progress = &hook;
    const SlowDevice slow(cpu, F);
    Tensor out({1, c.n, c.H, c.D}), lse({1, c.H, c.n});
    slow.step_forward(c.q.view(), c.k.view(), c.v.view(), out.view(), lse.view(), p);
    return std::pair<int, double>(n, slow.spun_seconds());
  };
  const auto [n1, spun1] = polls(1.0);
  const auto [n3, spun3] = polls(3.0);
  EXPECT_EQ(spun1, 0.0);
  EXPECT_GT(n1, 0);  // the kernel itself polls between tiles
  // The spin adds about one call per kPollSeconds of spinning.
  EXPECT_GE(n3, n1 + static_cast<int>(0.5 * spun3 / SlowDevice::kPollSeconds));
}

// Host memory that is not host memory to the seam: a device whose kernels would be asynchronous.
class AsyncStandIn final : public device::CpuDevice {
 public:
  bool host_memory() const override { return false; }
};

TEST(SlowDevice, Refusals) {
  const std::shared_ptr<const device::Device> cpu = device::make_cpu_device();
  EXPECT_THROW(SlowDevice(cpu, 0.9), Error);
  EXPECT_THROW(SlowDevice(cpu, std::numeric_limits<double>::quiet_NaN()), Error);
  EXPECT_THROW(SlowDevice(cpu, std::numeric_limits<double>::infinity()), Error);
  EXPECT_THROW(SlowDevice(nullptr, 1.5), Error);
  EXPECT_THROW(SlowDevice(std::make_shared<const AsyncStandIn>(), 1.5), Error);
  EXPECT_NO_THROW(SlowDevice(cpu, 1.0));
}

TEST(SlowDevice, RanksCountFromTheEndWhenNegative) {
  EXPECT_EQ(resolve_slow_ranks({}, 4), std::vector<int>{});
  EXPECT_EQ(resolve_slow_ranks({-1}, 4), std::vector<int>{3});
  EXPECT_EQ(resolve_slow_ranks({0, -1}, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(resolve_slow_ranks({3, 0, -1, 0}, 4), (std::vector<int>{0, 3}));  // sorted, once each
  EXPECT_EQ(resolve_slow_ranks({-4}, 4), std::vector<int>{0});
  EXPECT_THROW(resolve_slow_ranks({4}, 4), Error);
  EXPECT_THROW(resolve_slow_ranks({-5}, 4), Error);
}

}  // namespace
}  // namespace burst::bench
