// src/strategies/step_log.h — a pass's measurements (internal): times of kernels and waits,
// per-step records for DistConfig::timeline, and the DistStats fields a strategy owns.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "burst/strategy.h"
#include "strategies/strategy_impl.h"

namespace burst::strategies {

/// Seconds a pass spent in kernels and blocked in communication (for DistStats).
struct PassTimes {
  double compute_seconds = 0, comm_seconds = 0;
};

/// Copies one pass's measurements into the DistStats fields a strategy owns.
inline void fill_stats(DistStats& stats, const PassTimes& t, std::int64_t visible_pairs,
                       std::int64_t peak_buffer_bytes) {
  stats.compute_seconds = t.compute_seconds;
  stats.exposed_comm_seconds = t.comm_seconds;
  stats.visible_pairs = visible_pairs;
  stats.peak_buffer_bytes = peak_buffer_bytes;
}

/// Adds the wall time of its scope to *sink (no-op for nullptr).
class Stopwatch {
 public:
  explicit Stopwatch(double* sink) : sink_(sink), t0_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() {
    if (sink_) *sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  Stopwatch(const Stopwatch&) = delete;
  Stopwatch& operator=(const Stopwatch&) = delete;

 private:
  double* sink_;
  std::chrono::steady_clock::time_point t0_;
};

/// One step's measurements on this rank (DistConfig::timeline; StepRecord gives the meaning of
/// each field): seconds in kernels (wall and thread CPU), blocked in waits, in copies; bytes.
struct StepTimes {
  double compute = 0, compute_cpu = 0, wait = 0, copy = 0;
  std::int64_t sent = 0, received = 0;
};

/// CPU seconds of the calling thread (CLOCK_THREAD_CPUTIME_ID).
double thread_cpu_seconds();

/// Where a pass writes its per-step measurements: `steps` (resized to n zeroed records) when the
/// caller records, else one scratch record, so that the step loop writes unconditionally and
/// only the thread CPU clock is read on request (on()).
class StepLog {
 public:
  StepLog(std::vector<StepTimes>* steps, int n) : steps_(steps) {
    if (steps_) steps_->assign(static_cast<std::size_t>(n), StepTimes{});
  }
  bool on() const { return steps_ != nullptr; }
  StepTimes& at(int t) { return steps_ ? (*steps_)[static_cast<std::size_t>(t)] : scratch_; }
  /// Runs fn() as step t's kernel work: its wall seconds go to the record and to *total.
  template <typename F>
  void compute(int t, double& total, F&& fn) {
    const double c0 = on() ? thread_cpu_seconds() : 0.0;
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += s;
    StepTimes& r = at(t);
    r.compute += s;
    if (on()) r.compute_cpu += thread_cpu_seconds() - c0;
  }

 private:
  std::vector<StepTimes>* steps_;
  StepTimes scratch_;
};

/// Appends `steps` to setup.cfg.timeline as pass `pass` ("fwd" / "bwd") of this rank, record i
/// being step i (no-op when the configuration has no timeline). whole_pass: one record that
/// stands for the whole pass (StepRecord::whole_pass).
void record_timeline(const Setup& setup, const char* pass, const std::vector<StepTimes>& steps,
                     bool whole_pass = false);

}  // namespace burst::strategies
