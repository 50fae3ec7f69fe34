// apps/lm/progress.h — progress lines with an ETA for long collective phases (`burst eval`).
//
// Owns: a list of phases with their work (flop), a clock, and a ticker thread that prints one
// line at least every `interval` seconds while a phase runs — also inside a single long call
// (one layer's distributed attention over the whole KJV takes tens of seconds). The ETA is the
// remaining work at the rates measured so far: per kind of phase once a phase of that kind has
// finished, else a prior rate given for the kind, else the average rate of every finished phase;
// the running phase is credited with its elapsed time at that rate (at most 99 % of its work).
// Before any rate is known the line says "ETA after the first phase".
// Does not: communicate (rank 0 alone prints; phases are collective, so ranks move together).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime.h"

namespace burst::lm {

class Progress {
 public:
  struct Phase {
    std::string name;  ///< printed, e.g. "layer 1/2 attention"
    std::string kind;  ///< phases of one kind share a rate, e.g. "attention", "dense"
    double work = 0;   ///< flop (or any unit shared by all phases), >= 0
  };

  /// Starts the ticker when `enabled` (lines go to stderr prefixed by `prefix`).
  Progress(std::string prefix, std::vector<Phase> phases, bool enabled, double interval_seconds = 5.0);
  ~Progress();  ///< stops the ticker
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Phase i begins (the previous one, if any, ends now). i in [0, phases). Thread-safe.
  void begin(std::size_t i);
  /// Appends phases (e.g. the self-check, whose size is known only later). Thread-safe.
  void add(const std::vector<Phase>& phases);
  /// A rate (work per second) for phases of `kind` until one of them has finished (e.g. from a
  /// short timed run of the same kernel). Thread-safe.
  void set_prior_rate(const std::string& kind, double work_per_second);
  /// The running phase ends; no phase runs until the next begin().
  void end();
  /// The progress line as it would be printed now (tests; the ticker prints this).
  std::string line() const;
  /// Estimated seconds to finish every phase, or < 0 before any phase has finished.
  double eta_seconds() const;

 private:
  double eta_locked(double now) const;
  void end_locked(double now);
  void run(double interval_seconds);

  std::string prefix_;
  std::vector<Phase> phases_;
  std::vector<double> seconds_;  // per phase, once finished (< 0: not finished)
  std::map<std::string, double> prior_rates_;
  std::ptrdiff_t current_ = -1;
  double current_start_ = 0;
  Stopwatch clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread ticker_;
};

}  // namespace burst::lm
