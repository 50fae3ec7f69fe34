// apps/lm/progress.cc
#include "progress.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "burst/error.h"

namespace burst::lm {

Progress::Progress(std::string prefix, std::vector<Phase> phases, bool enabled, double interval_seconds)
    : prefix_(std::move(prefix)), phases_(std::move(phases)), seconds_(phases_.size(), -1.0) {
  BURST_CHECK(interval_seconds > 0, InvalidArgument, "progress interval ", interval_seconds, " must be > 0");
  if (enabled) ticker_ = std::thread([this, interval_seconds] { run(interval_seconds); });
}

Progress::~Progress() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

void Progress::end_locked(double now) {
  if (current_ >= 0) seconds_[static_cast<std::size_t>(current_)] = now - current_start_;
  current_ = -1;
}

void Progress::begin(std::size_t i) {
  const std::lock_guard<std::mutex> lock(mu_);
  BURST_CHECK(i < phases_.size(), Internal, "progress phase ", i, " of ", phases_.size());
  const double now = clock_.seconds();
  end_locked(now);
  current_ = static_cast<std::ptrdiff_t>(i);
  current_start_ = now;
}

void Progress::end() {
  const std::lock_guard<std::mutex> lock(mu_);
  end_locked(clock_.seconds());
}

void Progress::set_prior_rate(const std::string& kind, double work_per_second) {
  const std::lock_guard<std::mutex> lock(mu_);
  if (work_per_second > 0) prior_rates_[kind] = work_per_second;
}

void Progress::add(const std::vector<Phase>& phases) {
  const std::lock_guard<std::mutex> lock(mu_);
  phases_.insert(phases_.end(), phases.begin(), phases.end());
  seconds_.resize(phases_.size(), -1.0);
}

double Progress::eta_locked(double now) const {
  std::map<std::string, std::pair<double, double>> by_kind;  // kind -> (work, seconds) finished
  double work_done = 0, seconds_done = 0;
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    if (seconds_[i] < 0) continue;
    auto& [w, s] = by_kind[phases_[i].kind];
    w += phases_[i].work;
    s += seconds_[i];
    work_done += phases_[i].work;
    seconds_done += seconds_[i];
  }
  const auto rate = [&](const std::string& kind) {
    const auto it = by_kind.find(kind);
    if (it != by_kind.end() && it->second.second > 0 && it->second.first > 0)
      return it->second.first / it->second.second;
    const auto prior = prior_rates_.find(kind);
    if (prior != prior_rates_.end()) return prior->second;
    return seconds_done > 0 && work_done > 0 ? work_done / seconds_done : -1.0;
  };
  double eta = 0;
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    if (seconds_[i] >= 0) continue;
    const double r = rate(phases_[i].kind);
    if (r <= 0) return -1;
    double left = phases_[i].work;
    if (static_cast<std::ptrdiff_t>(i) == current_) left -= std::min(0.99 * left, (now - current_start_) * r);
    eta += left / r;
  }
  return eta;
}

double Progress::eta_seconds() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return eta_locked(clock_.seconds());
}

std::string Progress::line() const {
  const std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_.seconds();
  double total = 0, done = 0;
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    total += phases_[i].work;
    if (seconds_[i] >= 0) done += phases_[i].work;
  }
  const double eta = eta_locked(now);
  char eta_text[64];
  if (eta < 0)
    std::snprintf(eta_text, sizeof eta_text, "ETA after the first phase");
  else
    std::snprintf(eta_text, sizeof eta_text, "ETA %.0f s", eta);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s%3.0f%% of the work in finished phases, %.0f s elapsed, %s; now: %s",
                prefix_.c_str(), total > 0 ? 100 * done / total : 0.0, now, eta_text,
                current_ >= 0 ? phases_[static_cast<std::size_t>(current_)].name.c_str() : "-");
  return buf;
}

void Progress::run(double interval_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::duration<double>(interval_seconds), [this] { return stop_; })) {
    lock.unlock();
    std::cerr << line() << "\n" << std::flush;
    lock.lock();
  }
}

}  // namespace burst::lm
