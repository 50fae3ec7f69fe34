// The device seam's staging under mpiexec -n 1..4 (src/strategies/staging.h, ring_skeleton.h):
// a host-memory stand-in device that behaves like a separate one — its "device" blocks are
// allocations apart from the wire buffers, so every staging copy is real, and it counts them —
// runs the ring executor beside the CPU device on the same payloads and compute.
// - Results: the stand-in's result equals the CPU device's bit for bit (the staging copies are
//   exact and the sums keep their order), forward (no write ring) and backward (write ring,
//   split own block), fp32 and bf16 write wires.
// - Copies: a received message is copied in once (bytes in = every byte the plan says this
//   rank receives: over the ranks, the plan's bytes sent); a message this rank originates is
//   copied out once and a forwarded one not at all (bytes out = the plan's bytes sent by this
//   rank minus the P − 2 forwarded read payloads). A staging that copied a forwarded payload
//   again, or skipped one, fails.
// - Every strategy (burst, ring, allgather, ulysses, usp, headpar, distflash) on the stand-in
//   beside the CPU device: forward and backward results bitwise equal (the stand-in's fresh
//   blocks hold NaN, so a pass that read memory it never wrote fails), and the staged bytes
//   the plan's: a message is staged in once at its receiver (over the ranks, bytes in = the
//   plan's bytes sent), a collective's whole send buffer out once and whole receive buffer in
//   once (all-to-all: P/(P−1) of the bytes sent; all-gather: the own block out, P blocks in;
//   reduce-scatter: P blocks out, the own summed block in — block sizes checked against the plan).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "burst/comm.h"
#include "burst/mask.h"
#include "burst/plan.h"
#include "device/cpu/cpu_device.h"
#include "plan_strategies.h"
#include "strategies/ring_skeleton.h"
#include "strategies/strategy_impl.h"
#include "strategy_device.h"
#include "wire_layout.h"

namespace burst {
namespace {

/// Host memory posing as a separate device: Device blocks are malloc'd apart from any
/// ByteBuffer (on_host() false), so staging must copy; copies and their bytes are counted.
/// A fresh block holds 0xFF bytes (fp32 NaN): a pass that reads memory it never wrote shows.
/// The tables a step or an index copy reads must be in its memory, as a GPU's kernels need
/// them (uploaded once: strategies/step_tables.h): a step forward whose positions or slice
/// table are host memory, or an index copy without its twin or with a twin other than the host
/// table, is counted in `host_tables` (the index copy then reads the twin: a wrong offset shows).
class StandInDevice final : public device::CpuDevice {
 public:
  bool host_memory() const override { return false; }
  device::Buffer allocate(std::int64_t bytes, device::MemoryKind kind) const override {
    if (kind == device::MemoryKind::PinnedHost) return CpuDevice::allocate(bytes, kind);
    const auto padded = static_cast<std::size_t>((bytes + 63) / 64 * 64 + 64);
    void* p = std::aligned_alloc(64, padded);
    std::memset(p, 0xFF, padded);
    blocks.emplace_back(static_cast<const char*>(p), bytes);
    return device::Buffer(
        p, bytes,
        [](const void* owner, void* data, std::int64_t) {
          auto& live = static_cast<const StandInDevice*>(owner)->blocks;
          for (std::size_t i = 0; i < live.size(); ++i)
            if (live[i].first == data) live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
          std::free(data);
        },
        this);
  }
  /// True when [p, p + bytes) lies in one of the device's live blocks.
  bool owns(const void* p, std::int64_t bytes) const {
    const auto* c = static_cast<const char*>(p);
    for (const auto& [base, n] : blocks)
      if (!std::less<>{}(c, base) && !std::less<>{}(base + n, c + bytes)) return true;
    return false;
  }
  void step_forward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const TensorView& lse, const kernels::KernelParams& p) const override {
    const auto S_q = q.size(1), S_kv = k.size(1);
    const auto slice_bytes = p.mask_slice_count * static_cast<std::int64_t>(sizeof(MaskSlice));
    if ((p.q_pos && !owns(p.q_pos, 8 * S_q)) || (p.kv_pos && !owns(p.kv_pos, 8 * S_kv)) ||
        (p.mask_slices && !owns(p.mask_slices, slice_bytes)))
      ++host_tables;
    CpuDevice::step_forward(q, k, v, out, lse, p);
  }
  void index_copy(const TensorView& src, const TensorView& dst, int dim, const std::int64_t* index,
                  const std::int64_t* index_twin, bool scatter, bool accumulate) const override {
    if (index != nullptr) {
      const std::int64_t n = (scatter ? src : dst).size(dim);
      if (!index_twin || !owns(index_twin, 8 * n) ||
          std::memcmp(index, index_twin, static_cast<std::size_t>(8 * n)) != 0)
        ++host_tables;
      if (index_twin && owns(index_twin, 8 * n)) index = index_twin;
    }
    CpuDevice::index_copy(src, dst, dim, index, nullptr, scatter, accumulate);
  }
  void reset() const { to_host = from_host = bytes_to_host = bytes_from_host = 0; }
  void copy_to_host(const std::byte* src, std::byte* dst, std::int64_t bytes) const override {
    ++to_host;
    bytes_to_host += bytes;
    CpuDevice::copy_to_host(src, dst, bytes);
  }
  void copy_from_host(const std::byte* src, std::byte* dst, std::int64_t bytes) const override {
    ++from_host;
    bytes_from_host += bytes;
    CpuDevice::copy_from_host(src, dst, bytes);
  }
  mutable std::int64_t to_host = 0, from_host = 0, bytes_to_host = 0, bytes_from_host = 0, host_tables = 0;
  mutable std::vector<std::pair<const char*, std::int64_t>> blocks;  // the live Device blocks
};

/// Runs the executor over `dev`: read payload of R bytes (byte i = (rank·31 + i) mod 251), write
/// accumulator of W floats; step compute adds a value of (step, partition, payload) into every
/// write float (both halves under split_own). Returns the result's fp32 values.
std::vector<float> run_ring(const Communicator& world, const device::Device& dev, std::int64_t R,
                            std::int64_t W, DType wire) {
  strategies::RingExecutor exec(world, dev, 1, world.size(), true, wire);
  device::Buffer own = exec.pool().get(R);
  std::vector<std::byte> host(static_cast<std::size_t>(R));
  for (std::int64_t i = 0; i < R; ++i)
    host[static_cast<std::size_t>(i)] = static_cast<std::byte>((world.rank() * 31 + i) % 251);
  std::memcpy(own.data(), host.data(), static_cast<std::size_t>(R));  // test-side: host memory, not counted
  strategies::RingRunStats rs;
  device::Buffer out = exec.run(
      std::move(own), W,
      [&](int, int j, const std::byte* read, float* write, const std::function<void()>&,
          strategies::RowSlice slice) {
        if (!write) return;
        const std::int64_t a = slice.begin(W), e = slice.end(W);
        for (std::int64_t i = a; i < e; ++i)
          write[i] += static_cast<float>(std::to_integer<int>(read[i % R])) * 0.37f + static_cast<float>(j);
      },
      rs, W > 0);
  std::vector<float> values(static_cast<std::size_t>(W));
  if (W > 0) std::memcpy(values.data(), out.data(), static_cast<std::size_t>(4 * W));
  return values;
}

TEST(DeviceStaging, CopiesAreThePlansAndResultsBitwiseTheCpuPaths) {
  const Communicator world = Communicator::world();
  const int P = world.size(), g = world.rank();
  const ProblemShape shape{1, 16 * P, 2, 2, 8, DType::F32};
  const std::int64_t S = shape.S_global / P, q_numel = S * shape.H * shape.D;
  const std::int64_t R_fwd = wire::kv_block(DType::F32, S * shape.H_kv * shape.D).bytes();
  const std::int64_t R_bwd = wire::query_block(DType::F32, q_numel, S * shape.H).bytes();
  const auto plan_sent = [&](const PassPlan& pass, int r) {
    return pass.bytes_sent[static_cast<std::size_t>(r)];
  };
  for (const DType wire_dtype : {DType::F32, DType::BF16}) {
    for (const bool backward : {false, true}) {
      if (!backward && wire_dtype == DType::BF16) continue;
      const std::int64_t R = backward ? R_bwd : R_fwd, W = backward ? q_numel : 0;
      const device::CpuDevice cpu;
      const StandInDevice standin;
      const std::vector<float> want = run_ring(world, cpu, R, W, wire_dtype);
      const std::vector<float> got = run_ring(world, standin, R, W, wire_dtype);
      ASSERT_EQ(want.size(), got.size());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), 4 * want.size()))
          << "P=" << P << " backward=" << backward;
      DistConfig cfg;
      cfg.strategy = StrategyKind::Burst;
      cfg.backward_side = BackwardSide::QuerySide;
      cfg.partials_dtype = wire_dtype;
      const Plan plan = Plan::make(cfg, shape, Mask::full(), P, P);  // one node: the flat ring
      const PassPlan& pass = backward ? plan.backward() : plan.forward();
      const std::int64_t sent = plan_sent(pass, g);
      std::int64_t sent_all = 0;
      for (int r = 0; r < P; ++r) sent_all += plan_sent(pass, r);
      EXPECT_EQ(world.all_reduce_sum(standin.bytes_from_host), sent_all)
          << "every byte sent is staged in once (P=" << P << ", backward=" << backward << ")";
      // Read payloads sent: P − 1, the first staged out, the others forwarded from their wire.
      EXPECT_EQ(standin.bytes_to_host, sent - (P - 2) * R)
          << "own payload once, partials once, forwarded payloads never (P=" << P << ", backward=" << backward
          << ")";
      // Messages: received ones are copied in once each (P − 1 read payloads, plus the write ring's
      // chain and home partials on the backward).
      const std::int64_t write_in = backward && P > 1 ? P - 1 + 1 : 0;
      EXPECT_EQ(standin.from_host, (P - 1) + write_in) << "P=" << P << " backward=" << backward;
    }
  }
}

/// One strategy's passes on `dev`: out, lse, dq, dk, dv of this rank, and the bytes `counter`
/// (the stand-in, or null) staged out and in during the forward and the backward.
struct StrategyRun {
  std::vector<float> out, lse, dq, dk, dv;
  std::int64_t to_host[2] = {0, 0}, from_host[2] = {0, 0};
};

std::unique_ptr<strategies::Strategy> make_strategy(const strategies::Setup& s) {
  switch (s.cfg.strategy) {
    case StrategyKind::Burst: return strategies::make_burst(s);
    case StrategyKind::Ring: return strategies::make_ring(s);
    case StrategyKind::AllGather: return strategies::make_allgather(s);
    case StrategyKind::Ulysses: return strategies::make_ulysses(s);
    case StrategyKind::Usp: return strategies::make_usp(s);
    case StrategyKind::HeadParallel: return strategies::make_headpar(s);
    case StrategyKind::DistFlash: return strategies::make_distflash(s);
  }
  return nullptr;
}

StrategyRun run_strategy(const Communicator& world, const DistConfig& cfg, const ProblemShape& shape,
                         std::shared_ptr<const device::Device> dev, const StandInDevice* counter) {
  const Communicator c = world.split(0, world.rank());
  const int P = c.size(), g = c.rank();
  auto resolved = std::make_shared<const ResolvedMask>(Mask::causal_mask(), shape.S_global, shape.S_global);
  auto plan = std::make_shared<const Plan>(Plan::make(cfg, shape, *resolved, P, P));
  const strategies::Setup setup{c,
                                cfg,
                                shape,
                                resolved,
                                plan,
                                g,
                                P,
                                NodeTopology{1, P, 0, g},
                                1.0f / std::sqrt(static_cast<float>(shape.D)),
                                std::move(dev)};
  const auto strategy = make_strategy(setup);
  const auto& pos = plan->layout().positions[static_cast<std::size_t>(g)];
  const auto S = static_cast<std::int64_t>(pos.size());
  Tensor q({shape.B, S, shape.H, shape.D}), dout({shape.B, S, shape.H, shape.D}),
      out({shape.B, S, shape.H, shape.D}), dq({shape.B, S, shape.H, shape.D}),
      k({shape.B, S, shape.H_kv, shape.D}), v({shape.B, S, shape.H_kv, shape.D}),
      dk({shape.B, S, shape.H_kv, shape.D}), dv({shape.B, S, shape.H_kv, shape.D}),
      lse({shape.B, shape.H, S});
  for (std::int64_t s = 0; s < S; ++s)  // values of the global position: the same problem at every P
    for (std::int64_t h = 0; h < shape.H; ++h)
      for (std::int64_t d = 0; d < shape.D; ++d) {
        const auto i = static_cast<std::size_t>((s * shape.H + h) * shape.D + d);
        const double x = static_cast<double>(pos[static_cast<std::size_t>(s)]) * 0.7 +
                         static_cast<double>(h) * 1.3 + static_cast<double>(d) * 0.29;
        q.vec()[i] = static_cast<float>(std::sin(x));
        dout.vec()[i] = static_cast<float>(std::cos(1.7 * x));
        if (h < shape.H_kv) {
          const auto j = static_cast<std::size_t>((s * shape.H_kv + h) * shape.D + d);
          k.vec()[j] = static_cast<float>(std::cos(0.9 * x));
          v.vec()[j] = static_cast<float>(std::sin(0.4 * x + 1.0));
        }
      }
  StrategyRun r;
  DistStats stats;
  if (counter) counter->reset();
  strategy->forward(q.view(), k.view(), v.view(), out.view(), lse.view(), stats);
  if (counter) {
    r.to_host[0] = counter->bytes_to_host;
    r.from_host[0] = counter->bytes_from_host;
    counter->reset();
  }
  strategy->backward(dout.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), dq.view(), dk.view(),
                     dv.view(), stats);
  if (counter) {
    r.to_host[1] = counter->bytes_to_host;
    r.from_host[1] = counter->bytes_from_host;
  }
  r.out = out.vec();
  r.lse = lse.vec();
  r.dq = dq.vec();
  r.dk = dk.vec();
  r.dv = dv.vec();
  return r;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

TEST(DeviceStaging, EveryStrategyStagesWhatItsPlanMovesAndComputesTheCpuResults) {
  const Communicator world = Communicator::world();
  const int P = world.size(), g = world.rank();
  const ProblemShape shape{1, 48, 12, 12, 8, DType::F32};  // 48 = 2P·k for P ≤ 4; H, H_kv divisible by P
  const std::int64_t B = shape.B, H = shape.H, Hk = shape.H_kv, D = shape.D;
  // The ring family twice: zigzag (every block visible: RingExecutor::run) and contiguous (causal
  // leaves blocks empty: the mask-aware schedule, RingExecutor::run_direct, at P > 1).
  const std::vector<std::pair<StrategyKind, LayoutKind>> cases = {
      {StrategyKind::Burst, LayoutKind::Zigzag},        {StrategyKind::Ring, LayoutKind::Zigzag},
      {StrategyKind::Burst, LayoutKind::Contiguous},    {StrategyKind::Ring, LayoutKind::Contiguous},
      {StrategyKind::AllGather, LayoutKind::Zigzag},    {StrategyKind::Ulysses, LayoutKind::Zigzag},
      {StrategyKind::Usp, LayoutKind::Zigzag},          {StrategyKind::HeadParallel, LayoutKind::Zigzag},
      {StrategyKind::DistFlash, LayoutKind::Contiguous}};
  for (const auto& [kind, layout] : cases) {
    DistConfig cfg;
    cfg.strategy = kind;
    cfg.layout = layout;
    if (kind == StrategyKind::Usp)
      cfg.ulysses_degree = P == 4 ? 2 : 1;  // a ring of all-to-all groups at P = 4
    const std::string name =
        std::string(to_string(kind)) + " " + to_string(layout) + " P=" + std::to_string(P);
    const StrategyRun want = run_strategy(world, cfg, shape, device::make_cpu_device(), nullptr);
    const auto standin = std::make_shared<const StandInDevice>();
    const StrategyRun got = run_strategy(world, cfg, shape, standin, standin.get());
    EXPECT_TRUE(bitwise_equal(want.out, got.out) && bitwise_equal(want.lse, got.lse)) << name << " forward";
    EXPECT_TRUE(bitwise_equal(want.dq, got.dq) && bitwise_equal(want.dk, got.dk) &&
                bitwise_equal(want.dv, got.dv))
        << name << " backward";

    const Plan plan = Plan::make(cfg, shape, Mask::causal_mask(), P, P);
    if (layout == LayoutKind::Contiguous && kind != StrategyKind::DistFlash && P > 1) {
      EXPECT_TRUE(plan.forward().mask_aware && plan.backward().mask_aware)
          << name << ": not the mask-aware schedule";
    }
    const auto S = static_cast<std::int64_t>(plan.layout().positions[static_cast<std::size_t>(g)].size());
    for (int pass = 0; pass < 2; ++pass) {
      const std::string what = name + (pass == 0 ? " forward" : " backward");
      const std::int64_t sent =
          (pass == 0 ? plan.forward() : plan.backward()).bytes_sent[static_cast<std::size_t>(g)];
      const std::int64_t out = got.to_host[pass], in = got.from_host[pass];
      // One rank stages nothing, but the ring executor (burst, ring, usp) stages its own payload out.
      if (P == 1 && kind != StrategyKind::Burst && kind != StrategyKind::Ring && kind != StrategyKind::Usp) {
        EXPECT_EQ(out + in, 0) << what << ": one rank stages nothing";
        continue;
      }
      switch (kind) {
        case StrategyKind::Burst:
        case StrategyKind::Ring:
        case StrategyKind::DistFlash:  // messages: each received one staged in once
          EXPECT_EQ(world.all_reduce_sum(in), world.all_reduce_sum(sent)) << what;
          if (P > 1) {
            EXPECT_LE(out, sent) << what << ": a payload sent to several ranks is staged out once";
          }
          break;
        case StrategyKind::Ulysses:  // two all-to-alls, equal segments: P segments out and in, P − 1 sent
          EXPECT_EQ(out, sent * P / (P - 1)) << what;
          EXPECT_EQ(in, sent * P / (P - 1)) << what;
          break;
        case StrategyKind::Usp: {  // all-to-alls in groups of u, and the ring's messages
          const int u = strategies::resolve_ulysses_degree(cfg.ulysses_degree, P, Hk);
          const auto split = strategies::make_head_split(H, Hk, u, "usp");
          std::vector<std::int64_t> len;
          for (int m = g / u * u; m < g / u * u + u; ++m)
            len.push_back(
                static_cast<std::int64_t>(plan.layout().positions[static_cast<std::size_t>(m)].size()));
          const std::int64_t a2a = pass == 0 ? strategies::ulysses_forward_bytes(split, len, B, D, g % u)
                                             : strategies::ulysses_backward_bytes(split, len, B, D, g % u);
          const std::int64_t a2a_staged = u > 1 ? a2a * u / (u - 1) : 0;
          EXPECT_EQ(world.all_reduce_sum(in), world.all_reduce_sum(a2a_staged + sent - a2a)) << what;
          break;
        }
        case StrategyKind::AllGather: {  // all-gather K,V; backward also reduce-scatters dK,dV (fp32)
          const std::int64_t kv = 4 * 2 * B * S * Hk * D, grads = pass == 0 ? 0 : 4 * 2 * B * S * Hk * D;
          ASSERT_EQ(sent, (P - 1) * (kv + grads)) << what << ": the plan's blocks";
          EXPECT_EQ(out, kv + P * grads) << what;
          EXPECT_EQ(in, P * kv + grads) << what;
          break;
        }
        case StrategyKind::HeadParallel: {  // all-gather of every head, reduce-scatter of every head
          const std::int64_t gathered =
              pass == 0 ? 4 * B * S * (H + 2 * Hk) * D : 4 * B * S * (2 * H * D + 2 * Hk * D + 2 * H);
          const std::int64_t scattered = pass == 0 ? 4 * B * S * H * (D + 1) : 4 * B * S * (H + 2 * Hk) * D;
          ASSERT_EQ(sent, (P - 1) * (gathered + scattered)) << what << ": the plan's blocks";
          EXPECT_EQ(out, gathered + P * scattered) << what;
          EXPECT_EQ(in, P * gathered + scattered) << what;
          break;
        }
      }
    }
  }
}

/// One DistAttention forward and backward on this rank's shards of a seeded problem: the
/// host constructor (on null) or the device one. Results as StrategyRun (fp32 values).
StrategyRun run_dist(const Communicator& world, const DistConfig& cfg, const ProblemShape& shape,
                     const DistAttention::OnDevice* on) {
  DistAttention attn = on ? DistAttention(world, cfg, shape, Mask::causal_mask(), *on)
                          : DistAttention(world, cfg, shape, Mask::causal_mask());
  const auto& pos = attn.positions();
  const std::int64_t S = attn.local_length(), B = shape.B, H = shape.H, Hk = shape.H_kv, D = shape.D;
  const bool bf16 = shape.dtype == DType::BF16;
  // An operand in the problem's dtype: fp32 values, or their bf16 bits.
  struct Operand {
    std::vector<float> f;
    std::vector<std::uint16_t> h;
    std::vector<std::int64_t> shape;
    TensorView view(bool half) {
      return half ? make_view(static_cast<const void*>(h.data()), DType::BF16, shape)
                  : make_view(f.data(), shape);
    }
    std::vector<float> values(bool half) const {
      if (!half) return f;
      std::vector<float> r;
      for (const std::uint16_t x : h) r.push_back(bf16_to_float(x));
      return r;
    }
  };
  const auto make = [&](std::int64_t heads, double freq) {
    Operand t{std::vector<float>(static_cast<std::size_t>(B * S * heads * D)), {}, {B, S, heads, D}};
    for (std::int64_t i = 0; i < S; ++i)
      for (std::int64_t j = 0; j < heads * D; ++j)
        t.f[static_cast<std::size_t>(i * heads * D + j)] = static_cast<float>(
            std::sin(freq * static_cast<double>(pos[static_cast<std::size_t>(i)] * 97 + j)));
    for (const float x : t.f) t.h.push_back(bf16_from_float(x));
    return t;
  };
  Operand q = make(H, 0.31), k = make(Hk, 0.57), v = make(Hk, 0.73), dout = make(H, 0.19), out = make(H, 0.0),
          dq = make(H, 0.0), dk = make(Hk, 0.0), dv = make(Hk, 0.0);
  Tensor lse({B, H, S});
  attn.forward(q.view(bf16), k.view(bf16), v.view(bf16), out.view(bf16), lse.view());
  attn.backward(dout.view(bf16), q.view(bf16), k.view(bf16), v.view(bf16), out.view(bf16), lse.view(),
                dq.view(bf16), dk.view(bf16), dv.view(bf16));
  return {out.values(bf16), lse.vec(), dq.values(bf16), dk.values(bf16), dv.values(bf16), {0, 0}, {0, 0}};
}

// DistAttention on a device whose memory is not host memory (DistAttention::OnDevice with the
// stand-in): the façade's checks, its fp32 stand-ins and their rounding through the device, the
// kernels' positions and mask slices and the index copies' rows read from the tables uploaded
// once (step_tables.h: every forward step's tables and every index table in the stand-in's
// memory, none a host array a GPU would upload per call; the stand-in's blocks start as NaN, so
// an offset off by one row reads a NaN position or the wrong one). Every strategy, fp32 and bf16
// (the rounding of out, dq, dk, dv): bitwise the host constructor's results. A NaN in q is
// refused on every rank with the host's message.
TEST(DeviceStaging, DistAttentionOnADeviceComputesTheHostResults) {
  const Communicator world = Communicator::world();
  const int P = world.size();
  const std::vector<std::pair<StrategyKind, LayoutKind>> cases = {
      {StrategyKind::Burst, LayoutKind::Zigzag},        {StrategyKind::Ring, LayoutKind::Contiguous},
      {StrategyKind::Burst, LayoutKind::Striped},       {StrategyKind::AllGather, LayoutKind::Zigzag},
      {StrategyKind::Ulysses, LayoutKind::Zigzag},      {StrategyKind::Usp, LayoutKind::Zigzag},
      {StrategyKind::HeadParallel, LayoutKind::Zigzag}, {StrategyKind::DistFlash, LayoutKind::Contiguous}};
  const auto standin = std::make_shared<const StandInDevice>();
  const DistAttention::OnDevice on{standin, kHost};
  for (const DType dtype : {DType::F32, DType::BF16})
    for (const auto& [kind, layout] : cases) {
      const ProblemShape shape{1, 48, 12, 12, 8, dtype};
      DistConfig cfg;
      cfg.strategy = kind;
      cfg.layout = layout;
      if (kind == StrategyKind::Usp) cfg.ulysses_degree = P == 4 ? 2 : 1;
      const std::string name = std::string(to_string(kind)) + " " + to_string(layout) + " " +
                               to_string(dtype) + " P=" + std::to_string(P);
      standin->host_tables = 0;
      const StrategyRun want = run_dist(world, cfg, shape, nullptr), got = run_dist(world, cfg, shape, &on);
      EXPECT_EQ(standin->host_tables, 0) << name << ": steps or index copies read tables in host memory";
      EXPECT_TRUE(bitwise_equal(want.out, got.out) && bitwise_equal(want.lse, got.lse)) << name << " forward";
      EXPECT_TRUE(bitwise_equal(want.dq, got.dq) && bitwise_equal(want.dk, got.dk) &&
                  bitwise_equal(want.dv, got.dv))
          << name << " backward";
    }
  DistConfig cfg;
  const ProblemShape shape{1, 48, 12, 12, 8, DType::F32};
  std::string messages[2];
  for (int on_device = 0; on_device < 2; ++on_device) {
    DistAttention attn = on_device ? DistAttention(world, cfg, shape, Mask::causal_mask(), on)
                                   : DistAttention(world, cfg, shape, Mask::causal_mask());
    const std::int64_t S = attn.local_length();
    Tensor q({1, S, 12, 8}), k({1, S, 12, 8}), v({1, S, 12, 8}), out({1, S, 12, 8}), lse({1, 12, S});
    if (world.rank() == 0) q.vec()[static_cast<std::size_t>((1 * 12 + 3) * 8 + 5)] = std::nanf("");
    try {
      attn.forward(q.view(), k.view(), v.view(), out.view(), lse.view());
      ADD_FAILURE() << "a NaN in q was accepted (on_device " << on_device << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      messages[on_device] = e.what();
    }
  }
  EXPECT_NE(messages[0].find("q holds a NaN or infinity at [0,1,3,5]"), std::string::npos) << messages[0];
  EXPECT_EQ(messages[0], messages[1]);
}

}  // namespace
}  // namespace burst
