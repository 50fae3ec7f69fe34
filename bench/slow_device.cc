// The emulated slow rank (slow_device.h): the wrapped device's kernels, then a spin.
#include "bench/slow_device.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <utility>

#include "bench/harness.h"
#include "burst/error.h"

namespace burst::bench {

SlowDevice::SlowDevice(std::shared_ptr<const device::Device> inner, double factor)
    : inner_(std::move(inner)), factor_(factor) {
  BURST_CHECK(inner_ != nullptr, InvalidArgument, "SlowDevice: no device to wrap");
  BURST_CHECK(inner_->host_memory(), InvalidArgument, "SlowDevice: ", inner_->name(),
              " runs its kernels asynchronously; a slow rank is emulated on the CPU device only");
  BURST_CHECK(std::isfinite(factor) && factor >= 1.0, InvalidArgument, "--slow-factor ", factor,
              " (valid: a finite number >= 1)");
}

template <typename Kernel>
void SlowDevice::slowed(const kernels::KernelParams& p, Kernel&& kernel) const {
  const double c0 = cpu_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
  kernel();
  const double c1 = cpu_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
  kernel_seconds_ += c1 - c0;
  const double until = c1 + (factor_ - 1.0) * (c1 - c0);
  double now = c1, polled = c1;
  while (now < until) {  // busy: the core stays taken, as by a slower kernel
    if (p.progress && *p.progress && now - polled >= kPollSeconds) {
      (*p.progress)();
      polled = now;
    }
    now = cpu_clock_seconds(CLOCK_THREAD_CPUTIME_ID);
  }
  spun_seconds_ += now - c1;
}

void SlowDevice::step_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const TensorView& lse,
                              const kernels::KernelParams& p) const {
  slowed(p, [&] { inner_->step_forward(q, k, v, out, lse, p); });
}

void SlowDevice::step_backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                               const TensorView& v, const TensorView& lse, const TensorView& delta,
                               const TensorView& dq, const TensorView& dk, const TensorView& dv,
                               const kernels::KernelParams& p, bool accumulate, const TensorView* out) const {
  slowed(p, [&] { inner_->step_backward(dout, q, k, v, lse, delta, dq, dk, dv, p, accumulate, out); });
}

std::vector<int> resolve_slow_ranks(const std::vector<int>& requested, int P) {
  std::vector<int> ranks;
  for (const int r : requested) {
    BURST_CHECK(r >= -P && r < P, InvalidArgument, "--emulate-slow-rank ", r, " with ", P,
                " ranks (valid: 0..", P - 1, ", or -1..-", P, " counting from the last)");
    const int rank = r < 0 ? r + P : r;
    if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

}  // namespace burst::bench
