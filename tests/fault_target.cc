// The job tests/multinode_faults.sh kills or cuts mid-ring: forward + backward passes of a
// burst double ring (causal, S = 2048, zigzag) in a loop until killed. Between passes nothing
// else communicates, so the fault lands in a pass (or its agreement checks).
// Usage: mpirun ... fault_target TIMEOUT_SECONDS   (DistConfig::comm_timeout_seconds)
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "burst/mask.h"
#include "burst/splitmix64.h"
#include "burst/strategy.h"
#include "burst/tensor.h"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  if (argc != 2) {
    std::fprintf(stderr, "usage: fault_target TIMEOUT_SECONDS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  {
    using namespace burst;
    const Communicator world = Communicator::world();
    DistConfig cfg;
    cfg.strategy = StrategyKind::Burst;
    cfg.num_threads = 1;
    cfg.comm_timeout_seconds = std::atof(argv[1]);
    const ProblemShape shape{1, 2048, 4, 4, 32};
    DistAttention attn(world, cfg, shape, Mask::causal_mask());
    const std::int64_t S = attn.local_length();
    Tensor q({1, S, 4, 32}), k({1, S, 4, 32}), v({1, S, 4, 32}), dout({1, S, 4, 32});
    Tensor out({1, S, 4, 32}), lse({1, 4, S}), dq({1, S, 4, 32}), dk({1, S, 4, 32}), dv({1, S, 4, 32});
    SplitMix64 rng(static_cast<std::uint64_t>(world.rank()));
    for (Tensor* t : {&q, &k, &v, &dout})
      for (std::int64_t i = 0; i < t->numel(); ++i) t->data()[i] = static_cast<float>(rng.uniform() - 0.5);
    for (long pass = 0; pass < 1000000; ++pass) {
      attn.forward(q.view(), k.view(), v.view(), out.view(), lse.view());
      attn.backward(dout.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), dq.view(), dk.view(),
                    dv.view());
    }
  }
  MPI_Finalize();
  return 0;
}
