// The choice of a step's kernel by measured speed (see kernel_choice.h).
#include "device/kernel_choice.h"

#include <algorithm>
#include <cmath>

namespace burst::device {

int KernelChooser::choose(const Key& key, const std::vector<int>& candidates, int fallback,
                          const TimeFn& time) {
  if (const auto it = cache_.find(key); it != cache_.end()) return it->second.kernel;
  Choice c;
  if (candidates.empty()) {
    c.kernel = fallback;
  } else if (candidates.size() == 1) {
    c.kernel = candidates.front();
  } else {
    c.measured = true;
    std::optional<double> best;
    for (const int k : candidates) {
      std::optional<double> t = time(k);  // may throw: nothing cached then
      if (t && !(std::isfinite(*t) && *t >= 0)) t.reset();
      c.timings.emplace_back(k, t);
      if (t && (!best || *t < *best)) {  // strictly faster: a tie keeps the earlier candidate
        best = t;
        c.kernel = k;
      }
    }
    if (!best) c.kernel = fallback;
  }
  if (c.measured) ++measured_;
  const int chosen = c.kernel;
  cache_.emplace(key, std::move(c));
  return chosen;
}

const KernelChooser::Choice* KernelChooser::find(const Key& key) const {
  const auto it = cache_.find(key);
  return it == cache_.end() ? nullptr : &it->second;
}

std::map<int, std::int64_t> KernelChooser::chosen_counts() const {
  std::map<int, std::int64_t> n;
  for (const auto& [key, c] : cache_) ++n[c.kernel];
  return n;
}

double median_of(std::vector<double> times) {
  if (times.empty()) return 0;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace burst::device
