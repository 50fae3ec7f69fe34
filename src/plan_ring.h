// src/plan_ring.h — the ring family's step structure, pure (internal, no MPI): which block a rank
// holds at each step of the flat or double ring, where the block of its next step comes from, and
// the mask-aware routing (a block goes from its owner straight to the ranks that compute on it).
// One definition used by Plan (plan_steps.cc: steps and bytes), the cost model
// (cost_model_schedules.cc: the same steps timed) and the executor (strategies/ring_skeleton.cc,
// ring_direct.cc). Source: docs/algorithm.md §2, §3 and §7 (double ring), docs/strategies.md
// § Mask-aware rings.
#pragma once

#include <functional>
#include <vector>

namespace burst::ring {

/// A ring of P = n·L ranks: n nodes of L consecutive ranks (n = 1: the flat ring).
struct Topology {
  int n = 1, L = 1;
  int P() const { return n * L; }
};

/// a mod m in [0, m) for any sign of a (m > 0): ring neighbours (g ± 1) mod P.
inline int mod(int a, int m) { return ((a % m) + m) % m; }

/// Partition (block) held by rank g at step t, 0 ≤ t < P: inside a node the block moves one rank
/// to the right per step; every L steps the node's blocks move one node on
/// (docs/algorithm.md §7): ((a − ⌊t/L⌋) mod n)·L + (b − t) mod L for g = a·L + b.
int partition(const Topology& topo, int g, int t);

/// Where rank g's block of step t ≥ 1 comes from in the full ring: the sender and the step at
/// which the sender posted it. Inside a node: the left neighbour, posted at step t − 1; at a
/// round boundary of a double ring (t mod L = 0, n > 1): the same local rank of the previous
/// node, posted L steps earlier (the inter-node copy of docs/algorithm.md §7).
struct Source {
  int rank = -1;
  int posted_step = 0;
};
Source source(const Topology& topo, int g, int t);

/// Rank that holds g's own block at step t (the inverse of partition: partition(holder, t) = g).
int holder(const Topology& topo, int g, int t);

/// One rank's step in the mask-aware pass (docs/strategies.md § Mask-aware rings), t ≥ 1:
/// `block` = partition(g, t); `computes` when g's mask needs it (it then receives block's read
/// payload from its owner `block`, posted when the owner started step t − 1, and sends its write
/// partial home to `block` after the step); `serves` when holder(g, t) needs g's block (g then
/// sends its read payload to `holder`). Step 0 is every rank's own block.
struct DirectStep {
  int t = 0, g = 0, block = 0, holder = 0;
  bool computes = false, serves = false;
};
/// Calls visit for every step t = 1..P−1 and rank g = 0..P−1 in that order, with
/// need(reader, owner) = whether `reader` computes on `owner`'s block.
void for_each_direct_step(const Topology& topo, const std::function<bool(int, int)>& need,
                          const std::function<void(const DirectStep&)>& visit);

}  // namespace burst::ring
