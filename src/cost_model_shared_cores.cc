// Cost model: the step phase when ranks share cores (more ranks on a node than it has compute
// slots, as on a 2-core machine running 4 ranks). The step recurrence of cost::simulate gives every
// rank its own device; here the ranks computing on a node at a moment share its slots (processor
// sharing): each runs at min(1, slots / busy ranks) of its solo rate, so a rank that waits for a
// message lends its core to the others. Messages are as in cost::simulate: posted when the sender
// starts a step (step feeds) or finishes one (end feeds), one sender's messages on a link in turn.
#include <algorithm>
#include <limits>
#include <map>

#include "cost_model_internal.h"

namespace burst::cost {

void simulate_shared_cores(const Schedule& s, const std::vector<std::vector<Post>>& posts,
                           std::vector<std::vector<double>>& start, std::vector<std::vector<double>>& finish,
                           std::vector<std::vector<double>>& feed_arrival,
                           std::vector<std::vector<double>>& end_arrival, std::vector<double>& tail_end) {
  const std::size_t P = s.ranks.size();
  const std::size_t T = s.ranks[0].compute.size();
  // Whether a step's feed has been posted (its arrival known); a step no message gates is known.
  std::vector<std::vector<char>> feed_known(P, std::vector<char>(T + 1, 1));
  for (const auto& at_step : posts)
    for (const Post& m : at_step)
      if (!m.end_feed) feed_known[m.to][m.slot] = 0;
  LinkClock links(s);
  // Rank i starting (end_feed false) or finishing step t at `now` sends its messages of step t.
  auto post = [&](std::size_t i, std::size_t t, bool end_feed, double now) {
    for (const Post& m : posts[t]) {
      if (static_cast<std::size_t>(m.src) != i || m.end_feed != end_feed) continue;
      (end_feed ? end_arrival : feed_arrival)[m.to][m.slot] = links.send(m.src, m.inter_node, now, m.seconds);
      if (!end_feed) feed_known[m.to][m.slot] = 1;
    }
  };
  // Per rank: the step it is on, whether it computes (else it waits for that step's feed), and
  // the solo seconds left of its step.
  std::vector<std::size_t> step(P, 0);
  std::vector<char> computing(P, 1), done(P, 0);
  std::vector<double> left(P);
  double now = s.pre_seconds;
  for (std::size_t i = 0; i < P; ++i) {
    start[i][0] = now;
    left[i] = s.ranks[i].compute[0];
    post(i, 0, false, now);
  }
  std::size_t finished = 0;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (std::size_t guard = 0; finished < P && guard < 4 * P * T + 16; ++guard) {
    // Settle everything that happens at `now`: steps that end, feeds that have arrived.
    for (bool moved = true; moved;) {
      moved = false;
      for (std::size_t i = 0; i < P; ++i) {
        if (done[i]) continue;
        const std::size_t t = step[i];
        if (computing[i] && t == T) {  // the tail after the last step (RankSchedule::tail)
          if (left[i] <= 1e-12 * std::max(1.0, s.ranks[i].tail)) {
            tail_end[i] = now;
            computing[i] = 0;  // its slot goes to the ranks still computing
            done[i] = 1;
            ++finished;
            moved = true;
          }
          continue;
        }
        if (computing[i] && left[i] <= 1e-12 * std::max(1.0, s.ranks[i].compute[t])) {
          finish[i][t] = now;
          post(i, t, true, now);
          computing[i] = 0;
          moved = true;
          if (t + 1 == T) {
            tail_end[i] = now;
            if (s.ranks[i].tail > 0) {  // computes on, beside its end feeds
              step[i] = T;
              left[i] = s.ranks[i].tail;
              computing[i] = 1;
            } else {
              done[i] = 1;
              ++finished;
            }
            continue;
          }
          step[i] = t + 1;
        }
        const std::size_t u = step[i];
        if (!computing[i] && !done[i] && feed_known[i][u] &&
            (s.ranks[i].feed[u].src < 0 || feed_arrival[i][u] <= now)) {
          start[i][u] = now;
          left[i] = s.ranks[i].compute[u];
          computing[i] = 1;
          post(i, u, false, now);
          moved = true;
        }
      }
    }
    if (finished == P) break;
    // Each computing rank's share of its node's slots.
    std::map<int, int> busy;
    for (std::size_t i = 0; i < P; ++i)
      if (computing[i]) busy[s.node[i]] += s.ranks_per_member;
    std::vector<double> rate(P, 0.0);
    double next = kInf;
    for (std::size_t i = 0; i < P; ++i) {
      if (done[i]) continue;
      if (computing[i]) {
        rate[i] = std::min(1.0, static_cast<double>(s.compute_slots) / busy[s.node[i]]);
        next = std::min(next, now + left[i] / rate[i]);
      } else if (feed_known[i][step[i]]) {
        next = std::min(next, feed_arrival[i][step[i]]);
      }
    }
    if (next == kInf) break;  // a feed that is never posted: the schedule is malformed
    for (std::size_t i = 0; i < P; ++i)
      if (computing[i]) left[i] = std::max(0.0, left[i] - (next - now) * rate[i]);
    now = next;
  }
}

}  // namespace burst::cost
