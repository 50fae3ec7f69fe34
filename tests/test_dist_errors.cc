// Bad input to the distributed layer under mpiexec -n 1..4: arguments that differ between ranks,
// unsupported strategy/mask/parameter pairs, H % P ≠ 0 for ulysses, lengths that do not fit the
// layout, a bad tensor on one rank. For each case every rank must throw the same burst::Error
// (same kind, same message: hashed and compared with min/max over ranks) and the job must go on
// (no hang, no stray message): after each failure the ranks run a collective and a correct
// distributed pass on the same communicator.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "burst/strategy.h"
#include "test_util.h"

namespace burst {
namespace {

constexpr std::int64_t kD = 8;

/// Runs `body` on every rank, expects a burst::Error of `kind` on every rank with the same text.
void expect_same_error(const std::function<void()>& body, ErrorKind kind, const char* what) {
  const Communicator world = Communicator::world();
  std::string message = "<no error>";
  bool thrown = false;
  try {
    body();
  } catch (const Error& e) {
    thrown = true;
    EXPECT_EQ(e.kind(), kind) << what << ": " << e.what();
    message = e.what();
  }
  EXPECT_TRUE(thrown) << what << ": no error on rank " << world.rank();
  const auto h = static_cast<std::int64_t>(std::hash<std::string>{}(message)&0x7fffffffffffffffULL);
  EXPECT_EQ(world.all_reduce_min(h), world.all_reduce_max(h))
      << what << ": ranks disagree; here: " << message;
}

/// Proves the communicator is still usable and no payload is pending: a barrier and a full
/// burst forward whose output matches the single-process reference.
void expect_healthy() {
  const Communicator world = Communicator::world();
  world.barrier();
  const int P = world.size();
  const ProblemShape shape{1, 8LL * P, 2, 2, kD};
  DistConfig cfg;
  cfg.num_threads = 1;
  DistAttention attn(world, cfg, shape, Mask::causal_mask());
  const Tensor q = test::random_tensor({1, shape.S_global, 2, kD}, 1),
               k = test::random_tensor({1, shape.S_global, 2, kD}, 2);
  const Tensor v = test::random_tensor({1, shape.S_global, 2, kD}, 3);
  AttentionParams p;
  p.mask = Mask::causal_mask();
  p.impl = KernelImpl::Reference;
  const AttentionOutput ref = attention_forward(q.view(), k.view(), v.view(), p);
  const SequenceLayout& l = attn.plan().layout();
  Tensor ql({1, 8, 2, kD}), kl({1, 8, 2, kD}), vl({1, 8, 2, kD}), out({1, 8, 2, kD}), lse({1, 2, 8}),
      want({1, 8, 2, kD});
  shard(l, world.rank(), q.view(), ql.view());
  shard(l, world.rank(), k.view(), kl.view());
  shard(l, world.rank(), v.view(), vl.view());
  shard(l, world.rank(), ref.out.view(), want.view());
  attn.forward(ql.view(), kl.view(), vl.view(), out.view(), lse.view());
  EXPECT_LT(test::max_abs_diff(out, want), 1e-5);
}

ProblemShape shape_for(int P) { return {1, 8LL * P, 4, 2, kD}; }

DistConfig config(StrategyKind s) {
  DistConfig c;
  c.strategy = s;
  c.num_threads = 1;
  return c;
}

TEST(DistErrors, ShapeDiffersBetweenRanks) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  if (P == 1) return;  // nothing can differ
  ProblemShape s = shape_for(P);
  if (world.rank() == P - 1) s.S_global = 16LL * P;
  expect_same_error([&] { DistAttention(world, config(StrategyKind::Burst), s, Mask::causal_mask()); },
                    ErrorKind::InvalidArgument, "S_global differs");
  expect_healthy();
}

TEST(DistErrors, MaskDiffersBetweenRanks) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  if (P == 1) return;
  const Mask m = world.rank() == 0 ? Mask::causal_mask() : Mask::sliding_window(3, 0, true);
  expect_same_error([&] { DistAttention(world, config(StrategyKind::Ring), shape_for(P), m); },
                    ErrorKind::InvalidArgument, "mask differs");
  expect_healthy();
}

TEST(DistErrors, ParamsDifferBetweenRanks) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  if (P == 1) return;
  DistConfig c = config(StrategyKind::Burst);
  if (world.rank() == 1) c.softmax_scale = 0.5f;
  expect_same_error([&] { DistAttention(world, c, shape_for(P), Mask::full()); }, ErrorKind::InvalidArgument,
                    "softmax_scale differs");
  DistConfig d = config(StrategyKind::AllGather);
  if (world.rank() == 0) d.layout = LayoutKind::Striped;
  expect_same_error([&] { DistAttention(world, d, shape_for(P), Mask::full()); }, ErrorKind::InvalidArgument,
                    "layout differs");
  expect_healthy();
}

// The error names the argument and every rank's value (found by tests/py/fuzz_dist.py: the
// message used to say only "config, shape or mask").
TEST(DistErrors, DifferingArgumentIsNamedWithEveryRanksValue) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  if (P == 1) return;
  DistConfig c = config(StrategyKind::Burst);
  if (world.rank() == P - 1) c.softmax_scale = 0.5f;
  try {
    DistAttention(world, c, shape_for(P), Mask::full());
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("softmax_scale: rank 0 'default'"), std::string::npos) << m;
    EXPECT_NE(m.find("rank " + std::to_string(P - 1) + " '0.500000'"), std::string::npos) << m;
    EXPECT_EQ(m.find("layout"), std::string::npos) << "names an argument that does not differ: " << m;
  }
  expect_healthy();
}

// A NaN or infinity in one rank's input is refused on every rank (docs/api.md § NaN and inf),
// naming the tensor and its global position; the plan keeps working.
TEST(DistErrors, NonFiniteInputOnOneRankIsRefusedEverywhere) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  DistAttention attn(world, config(StrategyKind::Burst), shape_for(P), Mask::causal_mask());
  const std::int64_t n = attn.local_length();
  Tensor q({1, n, 4, kD}), k({1, n, 2, kD}), v({1, n, 2, kD}), out({1, n, 4, kD}), lse({1, 4, n});
  Tensor dq({1, n, 4, kD}), dk({1, n, 2, kD}), dv({1, n, 2, kD});
  Tensor bad = v;
  if (world.rank() == P - 1) bad.data()[bad.numel() - 1] = std::numeric_limits<float>::quiet_NaN();
  expect_same_error([&] { attn.forward(q.view(), k.view(), bad.view(), out.view(), lse.view()); },
                    ErrorKind::InvalidArgument, "NaN in v on the last rank");
  try {
    attn.forward(q.view(), k.view(), bad.view(), out.view(), lse.view());
  } catch (const Error& e) {
    const std::int64_t last = attn.plan().layout().positions[static_cast<std::size_t>(P - 1)].back();
    EXPECT_NE(e.message().find("v holds a NaN or infinity at [0," + std::to_string(n - 1) +
                               ",1,7] (global position " + std::to_string(last) + ")"),
              std::string::npos)
        << e.message();
  }
  EXPECT_NO_THROW(attn.forward(q.view(), k.view(), v.view(), out.view(), lse.view()));
  Tensor dout({1, n, 4, kD});
  if (world.rank() == 0) dout.data()[0] = std::numeric_limits<float>::infinity();
  expect_same_error(
      [&] {
        attn.backward(dout.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), dq.view(), dk.view(),
                      dv.view());
      },
      ErrorKind::InvalidArgument, "inf in dout on rank 0");
  expect_healthy();
}

// An invalid watchdog timeout on one rank only: every rank throws the same error (the timeout
// is not in the agreed fingerprint, ranks may pass different valid values).
TEST(DistErrors, InvalidCommTimeoutOnOneRank) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  DistConfig c = config(StrategyKind::Burst);
  c.comm_timeout_seconds = world.rank() == P - 1 ? -1.0 : 5.0 + world.rank();
  expect_same_error([&] { DistAttention(world, c, shape_for(P), Mask::causal_mask()); },
                    ErrorKind::InvalidArgument, "comm_timeout_seconds=-1");
  expect_healthy();
}
TEST(DistErrors, UnsupportedStrategyParameterPairs) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  DistConfig c = config(StrategyKind::Ring);
  c.backward_side = BackwardSide::QuerySide;
  expect_same_error([&] { DistAttention(world, c, shape_for(P), Mask::causal_mask()); },
                    ErrorKind::Unsupported, "ring with the query-side backward");
  c.strategy = StrategyKind::AllGather;
  expect_same_error([&] { DistAttention(world, c, shape_for(P), Mask::causal_mask()); },
                    ErrorKind::Unsupported, "allgather with the query-side backward");
  ProblemShape big = shape_for(P);
  big.D = 512;
  expect_same_error([&] { DistAttention(world, config(StrategyKind::Burst), big, Mask::full()); },
                    ErrorKind::Unsupported, "D > 256");
  expect_healthy();
}

TEST(DistErrors, UlyssesHeadsNotDivisibleByRanks) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  if (P == 1) return;                              // any H divides by 1
  const ProblemShape s{1, 8LL * P, P + 1, 1, kD};  // H = P + 1 is never divisible by P ≥ 2
  expect_same_error([&] { DistAttention(world, config(StrategyKind::Ulysses), s, Mask::causal_mask()); },
                    ErrorKind::Unsupported, "ulysses H % P != 0");
  expect_healthy();
}

TEST(DistErrors, LengthDoesNotFitTheLayout) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  DistConfig c = config(StrategyKind::Burst);
  c.layout = LayoutKind::Zigzag;
  const ProblemShape odd{1, 3LL * P, 2, 2, kD};  // divisible by P, never by 2P
  expect_same_error([&] { DistAttention(world, c, odd, Mask::causal_mask()); }, ErrorKind::InvalidArgument,
                    "zigzag needs S % 2P == 0");
  try {  // the message names the fix
    DistAttention(world, c, odd, Mask::causal_mask());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DistConfig::pad = true"), std::string::npos) << e.what();
  }
  c.layout = LayoutKind::Striped;
  const ProblemShape ragged{1, 4LL * P + 1, 2, 2, kD};
  if (P > 1) {
    expect_same_error([&] { DistAttention(world, c, ragged, Mask::causal_mask()); },
                      ErrorKind::InvalidArgument, "striped needs S % P == 0");
  }
  DistConfig r = config(StrategyKind::Burst);
  r.ranks_per_node = P + 1;  // never divides P
  expect_same_error([&] { DistAttention(world, r, shape_for(P), Mask::causal_mask()); },
                    ErrorKind::InvalidArgument, "ranks_per_node does not divide P");
  expect_healthy();
}

TEST(DistErrors, InvalidMaskSlicesAndShape) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  const ProblemShape s = shape_for(P);
  const Mask bad = Mask::from_slices({MaskSlice{0, s.S_global + 5, 0, s.S_global, SliceKind::Full, -1, -1}});
  expect_same_error([&] { DistAttention(world, config(StrategyKind::Burst), s, bad); },
                    ErrorKind::InvalidArgument, "slice beyond S_global");
  expect_same_error(
      [&] {
        DistAttention(world, config(StrategyKind::Ring), {1, 8LL * P, 3, 2, kD}, Mask::full());
      },
      ErrorKind::InvalidArgument, "H % H_kv != 0");
  expect_healthy();
}

TEST(DistErrors, BadTensorOnOneRankInAPass) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  const ProblemShape s = shape_for(P);
  for (StrategyKind kind : {StrategyKind::Burst, StrategyKind::Ring, StrategyKind::AllGather}) {
    DistAttention attn(world, config(kind), s, Mask::causal_mask());
    const std::int64_t n = attn.local_length();
    Tensor q({1, n, 4, kD}), k({1, n, 2, kD}), v({1, n, 2, kD}), out({1, n, 4, kD}), lse({1, 4, n});
    Tensor wrong({1, n, 3, kD});  // H_kv = 3 on the last rank only
    const TensorView kv = world.rank() == P - 1 ? wrong.view() : k.view();
    expect_same_error([&] { attn.forward(q.view(), kv, v.view(), out.view(), lse.view()); },
                      ErrorKind::InvalidArgument, "k shape on the last rank");
    // The same object still works afterwards: nothing was left in flight.
    EXPECT_NO_THROW(attn.forward(q.view(), k.view(), v.view(), out.view(), lse.view()));
    Tensor dq({1, n, 4, kD}), dk({1, n, 2, kD}), dv({1, n, 2, kD}), dq_wrong({1, n, 4, kD + 1});
    const TensorView dqv = world.rank() == 0 ? dq_wrong.view() : dq.view();
    expect_same_error(
        [&] {
          attn.backward(out.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), dqv, dk.view(),
                        dv.view());
        },
        ErrorKind::InvalidArgument, "dq shape on rank 0");
  }
  expect_healthy();
}

TEST(DistErrors, OperandOnAGpuOnOneRankIsNamedEverywhere) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  DistAttention attn(world, config(StrategyKind::Burst), shape_for(P), Mask::causal_mask());
  const std::int64_t n = attn.local_length();
  Tensor q({1, n, 4, kD}), k({1, n, 2, kD}), v({1, n, 2, kD}), out({1, n, 4, kD}), lse({1, 4, n});
  Tensor dq({1, n, 4, kD}), dk({1, n, 2, kD}), dv({1, n, 2, kD});
  // Marked as on cuda:0 on the last rank only, at an address no host read survives: refused
  // before any read, with the operand's name, on every rank.
  const auto on_gpu = [&](const Tensor& t) {
    TensorView x = t.view();
    if (world.rank() == P - 1) {
      x.device = Device{DeviceKind::Cuda, 0};
      x.data = reinterpret_cast<void*>(std::uintptr_t{64});
    }
    return x;
  };
  expect_same_error([&] { attn.forward(q.view(), on_gpu(k), v.view(), out.view(), lse.view()); },
                    ErrorKind::InvalidArgument, "k on a GPU on the last rank");
  EXPECT_NO_THROW(attn.forward(q.view(), k.view(), v.view(), out.view(), lse.view()));
  expect_same_error(
      [&] {
        attn.backward(out.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), dq.view(), dk.view(),
                      on_gpu(dv));
      },
      ErrorKind::InvalidArgument, "dv on a GPU on the last rank");
  try {
    attn.forward(on_gpu(q), k.view(), v.view(), out.view(), lse.view());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q is on cuda:0, but this call runs on host"), std::string::npos)
        << e.what();
  }
  expect_healthy();
}

}  // namespace
}  // namespace burst
