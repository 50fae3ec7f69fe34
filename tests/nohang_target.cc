// The job tests/nohang_faults.py runs to show that no rank waits forever on a peer that does not
// come (docs/multinode.md § No hang). Every rank builds a DistAttention (burst, causal, zigzag)
// and a DistKVCache over MPI_COMM_WORLD; then the last rank misbehaves:
//   late      it sleeps TIMEOUT + 4 s before its forward pass (arrives after the others' timeout)
//   absent    it never calls forward: it stays away (outside MPI) until the job is ended
//   first     it never comes to the very first collective, Communicator::world (the roll call
//             before its MPI_Comm_idup), and stays away as in absent
//   vanish    it never calls forward: it exits 0 at once, without MPI_Finalize
//   mismatch  it calls the KV cache's decode while the others call forward
//   good      it behaves (the control: the job ends 0)
// The other ranks print "nohang: rank R waits from EPOCH_SECONDS" to stderr just before the
// collective the last rank skips, so the driver can measure how long the job took to end after
// the wait began.
// A rank that stays away sleeps TIMEOUT + 60 s, then finalizes: it waits outside MPI, because
// Open MPI's MPI_Finalize is itself a fence over every process — a rank inside it once kept a
// job alive 124 s after both other ranks had called MPI_Abort (absent, 3 ranks, heavy load). If
// nothing ends the job, the driver sees it outlive TIMEOUT + 5 s and fails.
// Usage: mpirun -n P nohang_target MODE TIMEOUT_SECONDS
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "burst/kv_cache.h"
#include "burst/mask.h"
#include "burst/strategy.h"
#include "burst/tensor.h"

namespace {

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The last rank's absence: outside MPI until mpirun ends the job (see the file comment).
void stay_away(double timeout) { std::this_thread::sleep_for(std::chrono::duration<double>(timeout + 60)); }

void say_waiting(int rank) {
  std::fprintf(stderr, "nohang: rank %d waits from %.3f\n", rank, epoch_seconds());
  std::fflush(stderr);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  if (argc != 3) {
    std::fprintf(stderr, "usage: nohang_target late|absent|first|vanish|mismatch|good TIMEOUT_SECONDS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const std::string mode = argv[1];
  const double timeout = std::atof(argv[2]);
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (mode == "first") {
    if (world_rank == world_size - 1) {
      std::fprintf(stderr, "nohang: rank %d never creates the Communicator and stays away\n", world_rank);
      std::fflush(stderr);
      stay_away(timeout);
      MPI_Finalize();
      return 0;
    }
    say_waiting(world_rank);
  }
  {
    using namespace burst;
    const Communicator world = Communicator::world(timeout);
    DistConfig cfg;
    cfg.strategy = StrategyKind::Burst;
    cfg.num_threads = 1;
    cfg.comm_timeout_seconds = timeout;
    const ProblemShape shape{1, 64LL * world.size(), 2, 2, 16};
    DistAttention attn(world, cfg, shape, Mask::causal_mask());
    KVCacheConfig kc;
    kc.H = kc.H_kv = 2;
    kc.D = 16;
    kc.capacity_per_rank = 256;
    kc.chunk_tokens = 64;
    kc.num_threads = 1;
    DistKVCache cache(world, kc);
    Tensor kv_new({1, 4, 2, 16}), q1({1, 1, 2, 16}), o1({1, 1, 2, 16}), l1({1, 2, 1});
    cache.append({7}, kv_new.view(), kv_new.view());
    const std::int64_t S = attn.local_length();
    Tensor q({1, S, 2, 16}), out({1, S, 2, 16}), lse({1, 2, S});
    const bool last = world.rank() == world.size() - 1;
    if (last && mode == "absent") {
      std::fprintf(stderr, "nohang: rank %d skips the pass and stays away\n", world.rank());
      std::fflush(stderr);
      stay_away(timeout);
    } else if (last && mode == "vanish") {
      std::fprintf(stderr, "nohang: rank %d exits 0 without MPI_Finalize\n", world.rank());
      std::fflush(stderr);
      std::_Exit(0);
    } else if (last && mode == "mismatch") {
      cache.decode({7}, q1.view(), o1.view(), l1.view());
    } else {
      if (last && mode == "late") std::this_thread::sleep_for(std::chrono::duration<double>(timeout + 4));
      if (!last) say_waiting(world.rank());
      attn.forward(q.view(), q.view(), q.view(), out.view(), lse.view());
    }
  }
  MPI_Finalize();
  return 0;
}
