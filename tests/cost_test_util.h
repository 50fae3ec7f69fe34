// tests/cost_test_util.h — the toy cluster and workload of the cost-model tests, chosen so that
// the expected values can be worked out by hand in the tests' comments.
#pragma once

#include <cstdint>

#include "burst/cost_model.h"

namespace burst::test {

/// One visible pair of a B=1, H=1, D=1 forward costs 1 s (4 flop at 4 flop/s) and 8 bytes take
/// 1 s on an intra-node link, 4 s on an inter-node one (no latency).
inline ClusterSpec toy_cluster(int nodes, int per_node) {
  ClusterSpec c;
  c.name = "toy";
  c.nodes = nodes;
  c.devices_per_node = per_node;
  c.matmul_flops = 4;
  c.memory_bandwidth = 1e30;  // delta pass free unless a test says otherwise
  c.intra_bandwidth = 8;
  c.inter_bandwidth = 2;
  return c;
}

/// S_global, H, H_kv, D as given; B = 1, fp32, full mask, forward.
inline Workload toy_workload(std::int64_t S, std::int64_t H, std::int64_t H_kv, std::int64_t D) {
  Workload w;
  w.S_global = S;
  w.H = H;
  w.H_kv = H_kv;
  w.D = D;
  w.bytes_per_element = 4;
  return w;
}

}  // namespace burst::test
