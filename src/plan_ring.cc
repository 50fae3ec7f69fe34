// The ring family's step structure (plan_ring.h): docs/algorithm.md §2, §3, §7.
#include "plan_ring.h"

namespace burst::ring {

int partition(const Topology& topo, int g, int t) {
  const int a = g / topo.L, b = g % topo.L;
  return mod(a - t / topo.L, topo.n) * topo.L + mod(b - t, topo.L);
}

Source source(const Topology& topo, int g, int t) {
  const int a = g / topo.L, b = g % topo.L;
  if (topo.n > 1 && t % topo.L == 0) return {mod(a - 1, topo.n) * topo.L + b, t - topo.L};
  return {a * topo.L + mod(b - 1, topo.L), t - 1};
}

int holder(const Topology& topo, int g, int t) {
  // partition(x, t) = g  ⇔  x = a_g + ⌊t/L⌋ (mod n) nodes on, b_g + t (mod L) ranks on.
  const int a = g / topo.L, b = g % topo.L;
  return mod(a + t / topo.L, topo.n) * topo.L + mod(b + t, topo.L);
}

void for_each_direct_step(const Topology& topo, const std::function<bool(int, int)>& need,
                          const std::function<void(const DirectStep&)>& visit) {
  const int P = topo.P();
  for (int t = 1; t < P; ++t)
    for (int g = 0; g < P; ++g) {
      DirectStep s;
      s.t = t;
      s.g = g;
      s.block = partition(topo, g, t);
      s.holder = holder(topo, g, t);
      s.computes = need(g, s.block);
      s.serves = need(s.holder, g);
      visit(s);
    }
}

}  // namespace burst::ring
