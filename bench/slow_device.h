// bench/slow_device.h — a rank whose cores are slower than its neighbours', emulated
// deterministically for `burst bench dist --emulate-slow-rank R --slow-factor F`
// (docs/manycore.md § A slow rank, emulated).
//
// Owns: SlowDevice, a decorator of the device seam (src/device/device.h) that forwards every call
// to the device it wraps and, after each step kernel (step_forward, step_backward), keeps the
// calling thread busy for (F − 1) × that call's own duration: a kernel that took c seconds of the
// calling thread's CPU time returns after F·c of it. It spins (it holds the core, as a slow
// core's kernel would; it never sleeps) and polls the kernel's progress hook
// (KernelParams::progress: the ring's MPI_Testall) every kPollSeconds while it spins, as the
// slower kernel would between its tiles, so the transfers a slow rank serves keep moving.
// The clock is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID): on a shared machine a
// descheduled rank neither counts its lost time as kernel time nor spins it off. With one thread
// per rank that is the kernel's duration; with several, the calling thread's share (thread 0
// works inside the parallel region).
// Results are the wrapped device's, bit for bit: the decorator only adds time.
// Does not: slow copies, merges or communication (only the step kernels, the work a slower core
// stretches most), or decide which ranks are slow (the caller wraps those ranks' devices).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"

namespace burst::bench {

class SlowDevice final : public device::Device {
 public:
  /// Seconds of spinning between two calls of the progress hook.
  static constexpr double kPollSeconds = 50e-6;

  /// `inner`: the device every call goes to (not null; a host-memory device: the spin measures
  /// a kernel that is complete on return). factor ≥ 1 and finite (1: no spin).
  /// Throws: Error(InvalidArgument) for a null inner device, a device whose kernels run
  /// asynchronously (not host memory) or a bad factor.
  SlowDevice(std::shared_ptr<const device::Device> inner, double factor);

  double factor() const { return factor_; }
  /// CPU seconds of the calling thread inside the wrapped step kernels, and spun after them,
  /// since construction (spun ≈ (factor − 1) × kernel, slightly more: the spin ends on a clock
  /// read).
  double kernel_seconds() const { return kernel_seconds_; }
  double spun_seconds() const { return spun_seconds_; }

  std::string name() const override { return inner_->name() + " (slowed x" + std::to_string(factor_) + ")"; }
  bool host_memory() const override { return inner_->host_memory(); }
  device::Buffer allocate(std::int64_t bytes, device::MemoryKind kind) const override {
    return inner_->allocate(bytes, kind);
  }
  void release_pinned(ByteBuffer& bytes) const noexcept override { inner_->release_pinned(bytes); }
  device::StreamHandle stream() const override { return inner_->stream(); }
  device::Event record() const override { return inner_->record(); }
  bool ready(const device::Event& e) const override { return inner_->ready(e); }
  void wait(const device::Event& e) const override { inner_->wait(e); }
  void copy_to_host(const std::byte* src, std::byte* dst_host, std::int64_t bytes) const override {
    inner_->copy_to_host(src, dst_host, bytes);
  }
  void copy_from_host(const std::byte* src_host, std::byte* dst, std::int64_t bytes) const override {
    inner_->copy_from_host(src_host, dst, bytes);
  }
  void copy(const TensorView& src, const TensorView& dst) const override { inner_->copy(src, dst); }
  void index_copy(const TensorView& src, const TensorView& dst, int dim, const std::int64_t* index,
                  const std::int64_t* index_twin, bool scatter, bool accumulate) const override {
    inner_->index_copy(src, dst, dim, index, index_twin, scatter, accumulate);
  }
  void fill(const TensorView& dst, float value) const override { inner_->fill(dst, value); }
  void add(const TensorView& x, const TensorView& acc) const override { inner_->add(x, acc); }
  void convert(const TensorView& src, const TensorView& dst) const override { inner_->convert(src, dst); }
  void merge_forward(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                     const TensorView& lse_part) const override {
    inner_->merge_forward(out, lse, out_part, lse_part);
  }
  void attention_delta(const TensorView& dout, const TensorView& out,
                       const TensorView& delta) const override {
    inner_->attention_delta(dout, out, delta);
  }
  void step_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, const kernels::KernelParams& p) const override;
  void step_backward(const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& lse, const TensorView& delta, const TensorView& dq,
                     const TensorView& dk, const TensorView& dv, const kernels::KernelParams& p,
                     bool accumulate, const TensorView* out = nullptr) const override;
  std::uint64_t fingerprint(std::initializer_list<TensorView> views) const override {
    return inner_->fingerprint(views);
  }
  std::int64_t first_nonfinite(const TensorView& t) const override { return inner_->first_nonfinite(t); }

 private:
  /// Runs `kernel`, then spins (factor − 1) × its calling-thread CPU time, polling p.progress.
  template <typename Kernel>
  void slowed(const kernels::KernelParams& p, Kernel&& kernel) const;

  std::shared_ptr<const device::Device> inner_;
  double factor_;
  mutable double kernel_seconds_ = 0, spun_seconds_ = 0;  // a Device is used by one pass at a time
};

/// The ranks `bench dist --emulate-slow-rank` names, resolved against P ranks: each entry in
/// [−P, P), a negative one counting from the end (−1: the last rank); sorted, each rank once.
/// Throws: Error(InvalidArgument) naming an entry out of range.
std::vector<int> resolve_slow_ranks(const std::vector<int>& requested, int P);

}  // namespace burst::bench
