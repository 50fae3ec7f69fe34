// Step log (see step_log.h).
#include "strategies/step_log.h"

#include <time.h>

namespace burst::strategies {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void record_timeline(const Setup& setup, const char* pass, const std::vector<StepTimes>& steps,
                     bool whole_pass) {
  if (!setup.cfg.timeline) return;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const StepTimes& s = steps[i];
    StepRecord r;
    r.pass = pass;
    r.rank = setup.rank;
    r.step = static_cast<int>(i);
    r.whole_pass = whole_pass;
    r.compute_seconds = s.compute;
    r.compute_cpu_seconds = s.compute_cpu;
    r.wait_seconds = s.wait;
    r.copy_seconds = s.copy;
    r.bytes_sent = s.sent;
    r.bytes_received = s.received;
    setup.cfg.timeline->add(std::move(r));
  }
}

}  // namespace burst::strategies
