// bench/bench_timeline.h — `burst bench dist --timeline FILE`: the per-rank, per-step records of
// the timed passes (DistConfig::timeline, burst/strategy.h) gathered to rank 0 and written as
// JSON lines, one object per rank / pass / step, each with the run's configuration.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "burst/comm.h"
#include "burst/strategy.h"

namespace burst::bench {

/// What a timed pass adds to the records of its StepRecords: the repeat it belongs to and this
/// rank's wall seconds of the pass (DistStats::seconds).
struct TimelinePass {
  int repeat = 0;
  double pass_seconds = 0;
};

/// Collects the timed passes' records of one rank: the strategy's StepRecords, or — for a
/// strategy that records none — one whole-pass record from its DistStats (compute, exposed
/// communication as wait, bytes sent; bytes received unknown: −1).
class TimelineCollector {
 public:
  /// Checks on rank 0 that `path` can be written (creating it), before any pass runs; every
  /// rank throws the same Error(InvalidArgument) if not. Collective over `comm`.
  static void check_path(const Communicator& comm, const std::string& path);
  /// Call after each timed pass: takes the records the pass appended to `timeline` (clearing it).
  void add_pass(Timeline& timeline, const char* pass, int rank, int repeat, const DistStats& stats);
  /// Gathers every rank's records to rank 0 and writes them to `path` (rank 0 only), one JSON
  /// object per record: `config` plus rank, pass, step, whole_pass, repeat, pass_seconds,
  /// compute_seconds, compute_cpu_seconds, wait_seconds, copy_seconds, bytes_sent,
  /// bytes_received, and — when `rank_fma` holds one value per rank — that rank's
  /// fma_all_busy_gflops_rank (its cores' FMA rate with every core busy: bench dist's probe).
  /// Collective over `comm`. Throws Error(InvalidArgument) on rank 0 when the write fails after
  /// check_path passed (after the gather: no peer is left waiting).
  void write(const Communicator& comm, const nlohmann::json& config, const std::string& path,
             const std::vector<double>* rank_fma = nullptr) const;

 private:
  std::vector<StepRecord> records_;
  std::vector<TimelinePass> passes_;  // one per record
};

/// The CPU's model name from /proc/cpuinfo ("unknown" when unreadable).
std::string cpu_model_name();

}  // namespace burst::bench
