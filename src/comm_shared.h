// src/comm_shared.h — what the MPI Communicator (comm_mpi*.cc) and the Transport one
// (comm_transport.cc) share: the watchdog's state and the control exchange's record, so that
// both name absent ranks and mismatched calls with the same words (burst/comm.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "burst/error.h"

namespace burst {

/// The watchdog's setting and the label of what the ranks are doing (comm.h set_timeout).
struct Watch {
  double timeout_seconds = 300;
  std::string activity;
  int step = -1, steps = 0;
  std::string last_roll_call;  // the last control exchange every rank joined (for the message)

  /// What the rank was doing, for the watchdog's message: the activity and the ring step.
  std::string during() const {
    std::string text = activity.empty() ? std::string("(no activity set)") : activity;
    if (step >= 0 && step < steps)
      text += ", ring step " + std::to_string(step) + " of 0.." + std::to_string(steps - 1);
    else if (step >= 0)
      text += ", after the last ring step (partial sums going home to their owners)";
    return text;
  }
};

namespace control {

// Control exchanges: every rank sends every other one fixed-size record on a reserved tag, so a
// wait knows exactly which ranks have not arrived (their receive is pending), and a rank that
// arrived at another control exchange is recognised by its label. P − 1 messages per rank of
// ~250 B; they carry control data only (agreements, verdicts, scalar reductions), never payload.
constexpr int kControlTag = 32767;
constexpr int kControlValues = 6;
struct ControlRecord {
  std::uint64_t op = 0;  // FNV-1a of `what`: the call site
  std::int64_t count = 0;
  std::int64_t values[kControlValues] = {};
  char what[112] = {};
  char activity[112] = {};
};

inline std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (const char ch : text) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

template <std::size_t N>
void copy_text(char (&dst)[N], const std::string& src) {
  const std::size_t n = std::min(src.size(), N - 1);
  std::copy(src.data(), src.data() + n, dst);
  dst[n] = '\0';
}

/// This rank's record of the control exchange `what` carrying values [n ≤ kControlValues].
inline ControlRecord make_record(const std::string& what, const std::string& activity,
                                 const std::int64_t* values, int n) {
  BURST_CHECK(n >= 0 && n <= kControlValues, Internal, "control exchange of ", n, " values");
  ControlRecord mine;
  mine.op = fnv1a(what);
  mine.count = n;
  std::copy(values, values + n, mine.values);
  copy_text(mine.what, what);
  copy_text(mine.activity, activity);
  return mine;
}

/// Every rank's n values, rank-major [P·n], from all P records (all[me] = this rank's); throws
/// the same Error(InvalidArgument) on every rank when the ranks are in different control
/// exchanges (each rank's call and activity named), and records `what` as the last roll call.
inline std::vector<std::int64_t> unpack(std::vector<ControlRecord>& all, int me, int n,
                                        const std::string& what, Watch& watch) {
  const ControlRecord& mine = all[static_cast<std::size_t>(me)];
  const int P = static_cast<int>(all.size());
  bool same = true;
  for (auto& r : all) {
    r.what[sizeof(r.what) - 1] = r.activity[sizeof(r.activity) - 1] = '\0';
    same = same && r.op == mine.op && r.count == n;
  }
  if (!same) {
    std::string calls;
    for (int r = 0; r < P; ++r) {
      const ControlRecord& x = all[static_cast<std::size_t>(r)];
      calls +=
          (r ? "; rank " : "rank ") + std::to_string(r) + ": '" + x.what + "' during '" + x.activity + "'";
    }
    BURST_FAIL(InvalidArgument, "ranks are in different collective calls (", calls,
               "); every rank must make the same collective calls on a communicator in the same order");
  }
  watch.last_roll_call = what;
  std::vector<std::int64_t> out(static_cast<std::size_t>(P * n));
  for (int r = 0; r < P; ++r)
    std::copy(all[static_cast<std::size_t>(r)].values, all[static_cast<std::size_t>(r)].values + n,
              out.begin() + static_cast<std::ptrdiff_t>(r) * n);
  return out;
}

}  // namespace control
}  // namespace burst
