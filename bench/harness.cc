#include "bench/harness.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>

#include "burst/error.h"

namespace burst::bench {

double cpu_clock_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

Timing summarize(std::vector<double> samples) {
  BURST_CHECK(!samples.empty(), InvalidArgument, "bench: no timing samples to summarize");
  Timing t;
  t.samples = samples;
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  t.median = (n % 2 == 1) ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  t.min = samples.front();
  t.max = samples.back();
  t.repeats = static_cast<int>(n);
  return t;
}

Timing time_runs(const std::function<void()>& fn, const TimingOptions& opt) {
  BURST_CHECK(opt.repeats >= 1, InvalidArgument, "bench: repeats=", opt.repeats, " must be >= 1");
  BURST_CHECK(opt.warmup >= 0, InvalidArgument, "bench: warmup=", opt.warmup, " must be >= 0");
  for (int i = 0; i < opt.warmup; ++i) fn();
  std::vector<double> samples, cpu;
  samples.reserve(static_cast<std::size_t>(opt.repeats));
  for (int i = 0; i < opt.repeats; ++i) {
    const double c0 = cpu_clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    cpu.push_back(cpu_clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0);
    samples.push_back(std::chrono::duration<double>(t1 - t0).count());
    if (opt.after_each) opt.after_each();
  }
  Timing t = summarize(std::move(samples));
  t.cpu_samples = cpu;
  t.cpu_median = summarize(std::move(cpu)).median;
  return t;
}

void add_timing(nlohmann::json& record, const Timing& t, double flop) {
  record["seconds"] = t.median;
  record["seconds_min"] = t.min;
  record["seconds_max"] = t.max;
  record["repeats"] = t.repeats;
  record["cpu_seconds"] = t.cpu_median;
  if (flop > 0) {
    record["gflops_cpu"] = t.cpu_median > 0 ? flop / t.cpu_median / 1e9 : 0.0;
    record["flop"] = flop;
    record["gflops"] = t.median > 0 ? flop / t.median / 1e9 : 0.0;
    record["gflops_best"] = t.min > 0 ? flop / t.min / 1e9 : 0.0;
  }
}

void print_json_line(const nlohmann::json& record) {
  std::cout << record.dump() << '\n';
  std::cout.flush();
}

double load_average_1m() {
  std::ifstream f("/proc/loadavg");
  double v = -1;
  if (!(f >> v)) return -1;
  return v;
}

}  // namespace burst::bench
