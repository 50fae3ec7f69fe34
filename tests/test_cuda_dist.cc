// DistAttention with every operand in GPU memory (DistAttention::OnDevice with a CudaDevice,
// src/strategy_device.h) under mpiexec -n 1..4, the ranks sharing the GPUs there are (rank's GPU =
// local rank modulo their count): every strategy (burst, ring, allgather, ulysses, usp,
// distflash, headpar), the layouts (contiguous: the mask-aware schedule; zigzag, striped,
// balanced) and the double ring (burst at P = 4 as 2 nodes × 2), a causal and a document mask,
// GQA (H 4, H_kv 2), forward and backward in fp32, against the single-process fp64 oracle on
// the same global inputs (shard / unshard), within the tolerance rule of test_util.h (tied to a
// naive fp32 computation's error); bf16 at D = 64 (the fast kernels) within 2× the single-process
// GPU error (test_strategies_bf16's rule), with the steps on the device's measured choice (Auto),
// forced onto cuDNN and onto the fast kernels — cuDNN's per-step bf16 roundings bounded from the
// problem's magnitudes (step_magnitudes) — and a planted wrong cuDNN mask that must be caught.
// Results start as NaN on the GPU (every byte 0xFF), so a row a pass never writes fails. A NaN
// in q is refused on every rank, as on the host.
// Without a usable GPU on every rank the binary exits 77 (ctest: skipped), saying why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attention_device.h"
#include "burst/attention.h"
#include "burst/comm.h"
#include "burst/error.h"
#include "burst/mask.h"
#include "burst/strategy.h"
#include "device/cuda/attention_cudnn.h"
#include "device/cuda/cuda_device.h"
#include "dist_test_util.h"
#include "lowp_test_util.h"
#include "strategy_device.h"
#include "test_util.h"

namespace burst {
namespace {

constexpr std::int64_t kS = 96, kD = 16, kH = 4, kHkv = 2;  // 96: every layout divides it at P ≤ 4

int g_gpu = 0;  // this rank's GPU (main)

using Reference = test::OracleCase;

Reference make_reference(test::Family family) {
  return test::oracle_case({1, kS, kH, kHkv, kD}, test::mask_of(family, kS, /*seed=*/3, /*window=*/11), 10);
}

/// A contiguous host view's copy in the GPU's memory (or NaN bytes of its shape), and back.
struct GpuTensor {
  device::Buffer buffer;
  TensorView view;
  GpuTensor(const device::CudaDevice& dev, const Tensor& host, bool copy)
      : GpuTensor(dev, host.view(), copy) {}
  GpuTensor(const device::CudaDevice& dev, const TensorView& host, bool copy) {
    const std::int64_t bytes = host.numel() * static_cast<std::int64_t>(dtype_size(host.dtype));
    buffer = dev.allocate(bytes, device::MemoryKind::Device);
    view = make_view(static_cast<const void*>(buffer.data()), host.dtype,
                     std::vector<std::int64_t>(host.shape.begin(), host.shape.begin() + host.ndim));
    view.device = Device{DeviceKind::Cuda, g_gpu};
    if (copy) {
      dev.copy_from_host(static_cast<const std::byte*>(host.data), buffer.data(), bytes);
    } else {
      EXPECT_EQ(cudaMemsetAsync(buffer.data(), 0xFF, static_cast<std::size_t>(bytes),
                                static_cast<cudaStream_t>(dev.stream())),
                cudaSuccess);
    }
    dev.wait(dev.record());
  }
  /// The bytes back into host view `host` (same shape and dtype, contiguous).
  void download_into(const device::CudaDevice& dev, const TensorView& host) const {
    dev.copy_to_host(buffer.data(), static_cast<std::byte*>(host.data), buffer.size());
    dev.wait(dev.record());
  }
  /// fp32 contents as a host tensor.
  Tensor download(const device::CudaDevice& dev) const {
    Tensor t(std::vector<std::int64_t>(view.shape.begin(), view.shape.begin() + view.ndim));
    download_into(dev, t.view());
    return t;
  }
};

::testing::AssertionResult close(const char* what, const Tensor& got, const Tensor& want, double tol) {
  const double err = test::max_abs_diff(got, want);
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": max |gpu − fp64| = " << err << ", tolerance " << tol;
}

void run_case(const std::shared_ptr<const device::CudaDevice>& dev, const DistConfig& cfg,
              test::Family family) {
  static const Reference causal = make_reference(test::Family::Causal),
                         document = make_reference(test::Family::Document);
  const Reference& ref = family == test::Family::Causal ? causal : document;
  const Communicator world = Communicator::world();
  SCOPED_TRACE(std::string("strategy=") + to_string(cfg.strategy) + " layout=" + to_string(cfg.layout) +
               " mask=" + test::name_of(family) + " L=" + std::to_string(cfg.ranks_per_node) +
               " P=" + std::to_string(world.size()));
  std::unique_ptr<DistAttention> made;
  try {
    made = std::make_unique<DistAttention>(world, cfg, ref.shape, ref.mask,
                                           DistAttention::OnDevice{dev, Device{DeviceKind::Cuda, g_gpu}});
  } catch (const Error& e) {  // e.g. headpar with H_kv < P: refused on every rank, as on the host
    ASSERT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
    return;
  }
  DistAttention& attn = *made;
  const int rank = world.rank();
  const SequenceLayout& layout = attn.plan().layout();
  const Tensor qh = test::shard_of(layout, rank, ref.q), kh = test::shard_of(layout, rank, ref.k),
               vh = test::shard_of(layout, rank, ref.v), douth = test::shard_of(layout, rank, ref.dout);
  const GpuTensor q(*dev, qh, true), k(*dev, kh, true), v(*dev, vh, true), dout(*dev, douth, true);
  const GpuTensor out(*dev, qh, false), lse(*dev, Tensor({1, kH, attn.local_length()}), false);
  const GpuTensor dq(*dev, qh, false), dk(*dev, kh, false), dv(*dev, vh, false);
  attn.forward(q.view, k.view, v.view, out.view, lse.view);
  EXPECT_TRUE(close("out", out.download(*dev), test::shard_of(layout, rank, ref.out), ref.tol[0]));
  EXPECT_TRUE(close("lse", lse.download(*dev), test::rows_of(layout, rank, ref.lse), ref.tol[1]));
  EXPECT_EQ(attn.last_stats().bytes_sent, attn.plan().forward().bytes_sent[static_cast<std::size_t>(rank)]);
  attn.backward(dout.view, q.view, k.view, v.view, out.view, lse.view, dq.view, dk.view, dv.view);
  EXPECT_TRUE(close("dq", dq.download(*dev), test::shard_of(layout, rank, ref.dq), ref.tol[2]));
  EXPECT_TRUE(close("dk", dk.download(*dev), test::shard_of(layout, rank, ref.dk), ref.tol[3]));
  EXPECT_TRUE(close("dv", dv.download(*dev), test::shard_of(layout, rank, ref.dv), ref.tol[4]));
}

TEST(CudaDist, EveryStrategyOnGpuRanksMatchesTheFp64Oracle) {
  const auto dev = std::make_shared<const device::CudaDevice>(g_gpu);
  const int P = Communicator::world().size();
  struct Kind {
    StrategyKind strategy;
    LayoutKind layout;
  };
  const std::vector<Kind> kinds = {
      {StrategyKind::Burst, LayoutKind::Zigzag},       {StrategyKind::Burst, LayoutKind::Contiguous},
      {StrategyKind::Burst, LayoutKind::Striped},      {StrategyKind::Burst, LayoutKind::Balanced},
      {StrategyKind::Ring, LayoutKind::Zigzag},        {StrategyKind::Ring, LayoutKind::Contiguous},
      {StrategyKind::AllGather, LayoutKind::Zigzag},   {StrategyKind::Ulysses, LayoutKind::Zigzag},
      {StrategyKind::Usp, LayoutKind::Zigzag},         {StrategyKind::DistFlash, LayoutKind::Contiguous},
      {StrategyKind::HeadParallel, LayoutKind::Zigzag}};
  for (const Kind& kind : kinds)
    for (const test::Family family : {test::Family::Causal, test::Family::Document}) {
      DistConfig cfg;
      cfg.strategy = kind.strategy;
      cfg.layout = kind.layout;
      if (kind.strategy == StrategyKind::Usp) cfg.ulysses_degree = P == 4 ? 2 : 1;
      run_case(dev, cfg, family);
    }
  if (P == 4) {  // the double ring: 2 nodes × 2 ranks (DistConfig::ranks_per_node)
    DistConfig cfg;
    cfg.ranks_per_node = 2;
    run_case(dev, cfg, test::Family::Causal);
  }
}

// bf16 at D = 64 (the GPU's fast tensor-core kernels), every strategy: the distributed error
// against the fp64 oracle on the same rounded inputs must not grow beyond 2× the single-process
// GPU error (the entry path, src/attention_device.h, on the whole sequence) plus 32 fp32 ulps of
// the largest value — test_strategies_bf16's rule and reason: both errors are dominated by the one
// rounding of each result to bf16; a distributed run adds fp32-sized differences (merge order,
// partial sums) that move a value across at most one more rounding boundary.
using Forward = std::function<void(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const TensorView& out, const TensorView& lse)>;
using Backward = std::function<void(const TensorView& dout, const TensorView& q, const TensorView& k,
                                    const TensorView& v, const TensorView& out, const TensorView& lse,
                                    const TensorView& dq, const TensorView& dk, const TensorView& dv)>;

/// fwd then bwd on the GPU with q, k, v, dout (bf16-representable values) in bf16: out, lse, dq,
/// dk, dv widened to fp32.
std::vector<Tensor> bf16_run(const device::CudaDevice& dev, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& dout, const Forward& fwd, const Backward& bwd) {
  const DType dt = DType::BF16;
  test::Rounded rq = test::round_to(q, dt), rk = test::round_to(k, dt), rv = test::round_to(v, dt),
                rdout = test::round_to(dout, dt);
  test::Rounded rout = test::empty_rounded(q.shape(), dt), rdq = test::empty_rounded(q.shape(), dt),
                rdk = test::empty_rounded(k.shape(), dt), rdv = test::empty_rounded(k.shape(), dt);
  const Tensor lse({q.shape()[0], q.shape()[2], q.shape()[1]});
  const GpuTensor gq(dev, rq.view, true), gk(dev, rk.view, true), gv(dev, rv.view, true),
      gdout(dev, rdout.view, true), gout(dev, rout.view, false), glse(dev, lse, false),
      gdq(dev, rdq.view, false), gdk(dev, rdk.view, false), gdv(dev, rdv.view, false);
  fwd(gq.view, gk.view, gv.view, gout.view, glse.view);
  bwd(gdout.view, gq.view, gk.view, gv.view, gout.view, glse.view, gdq.view, gdk.view, gdv.view);
  gout.download_into(dev, rout.view);
  gdq.download_into(dev, rdq.view);
  gdk.download_into(dev, rdk.view);
  gdv.download_into(dev, rdv.view);
  for (test::Rounded* r : {&rout, &rdq, &rdk, &rdv}) test::widen_into(*r);
  return {rout.wide, glse.download(dev), rdq.wide, rdk.wide, rdv.wide};
}

/// Per element, an fp64 upper bound on the sum of the magnitudes of what a step-wise computation
/// adds into each result (causal, GQA; global q, k, v, dout, the bf16 out and the oracle's lse):
/// out: Σ_j P_ij |v_j|; dq: τ Σ_j M_ij |k_j|; dk: τ Σ_i M_ij |q_i|; dv: Σ_i P_ij |dO_i|, with
/// M_ij = P_ij (|dP_ij| + 2 |delta_i|) ≥ |dS_ij| + P_ij |delta_i|. A kernel that rounds each step's
/// contribution to bf16 before the fp32 accumulation (cuDNN: docs/gpu.md § cuDNN) adds at most
/// u · Σ_steps |contribution| ≤ u · magnitude; one that forms delta from a bf16 out or from the
/// stand-in O' (device/out_synth.h) adds at most u |delta_i| to each dS_ij / P_ij, again within
/// u · magnitude. So cuDNN's steps stay within 2u · magnitude of what the own kernels would give.
std::vector<Tensor> step_magnitudes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                    const Tensor& out, const Tensor& lse) {
  const std::int64_t S = q.shape()[1], H = q.shape()[2], H_kv = k.shape()[2], D = q.shape()[3];
  const double tau = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<Tensor> m = {Tensor(q.shape()), Tensor(lse.shape()), Tensor(q.shape()), Tensor(k.shape()),
                           Tensor(k.shape())};
  const auto at = [&](const Tensor& t, std::int64_t s, std::int64_t h, std::int64_t d) {
    return static_cast<double>(t.data()[(s * t.shape()[2] + h) * D + d]);
  };
  const auto add = [&](Tensor& t, std::int64_t s, std::int64_t h, std::int64_t d, double x) {
    float& e = t.vec()[static_cast<std::size_t>((s * t.shape()[2] + h) * D + d)];
    e = static_cast<float>(e + x);
  };
  for (std::int64_t h = 0; h < H; ++h) {
    const std::int64_t g = h / (H / H_kv);
    for (std::int64_t i = 0; i < S; ++i) {
      double delta = 0;
      for (std::int64_t d = 0; d < D; ++d) delta += at(dout, i, h, d) * at(out, i, h, d);
      const double l = lse.data()[h * S + i];
      for (std::int64_t j = 0; j <= i; ++j) {
        double s = 0, dp = 0;
        for (std::int64_t d = 0; d < D; ++d) {
          s += at(q, i, h, d) * at(k, j, g, d);
          dp += at(dout, i, h, d) * at(v, j, g, d);
        }
        const double P = std::exp(tau * s - l), M = P * (std::fabs(dp) + 2 * std::fabs(delta));
        for (std::int64_t d = 0; d < D; ++d) {
          add(m[0], i, h, d, P * std::fabs(at(v, j, g, d)));
          add(m[2], i, h, d, tau * M * std::fabs(at(k, j, g, d)));
          add(m[3], j, g, d, tau * M * std::fabs(at(q, i, h, d)));
          add(m[4], j, g, d, P * std::fabs(at(dout, i, h, d)));
        }
      }
    }
  }
  return m;
}

/// max over elements of |got − want| − c · mag (c = 0: the plain largest difference).
double excess(const Tensor& got, const Tensor& want, const Tensor& mag, double c) {
  double e = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i)
    e = std::max(e, std::fabs(static_cast<double>(got.data()[i]) - want.data()[i]) - c * mag.data()[i]);
  return e;
}

TEST(CudaDist, Bf16OnGpuRanksDoesNotGrowTheSingleProcessGpuError) {
  constexpr std::int64_t D = 64;
  const DType dt = DType::BF16;
  const Device gpu{DeviceKind::Cuda, g_gpu};
  const Communicator world = Communicator::world();
  const int rank = world.rank();
  const Tensor q = test::round_to(test::random_tensor({1, kS, kH, D}, 41), dt).wide,
               k = test::round_to(test::random_tensor({1, kS, kHkv, D}, 42), dt).wide,
               v = test::round_to(test::random_tensor({1, kS, kHkv, D}, 43), dt).wide,
               dout = test::round_to(test::random_tensor({1, kS, kH, D}, 44), dt).wide;
  AttentionParams p;
  p.mask = Mask::causal_mask();
  p.impl = KernelImpl::Reference;
  const AttentionOutput o = attention_forward(q.view(), k.view(), v.view(), p);
  const Tensor out_rounded = test::round_to(o.out, dt).wide;  // what a bf16 caller saves
  const AttentionGrads g =
      attention_backward(dout.view(), q.view(), k.view(), v.view(), out_rounded.view(), o.lse.view(), p);
  const Tensor* oracle[5] = {&o.out, &o.lse, &g.dq, &g.dk, &g.dv};
  const std::vector<Tensor> mag = step_magnitudes(q, k, v, dout, out_rounded, o.lse);
  const char* names[5] = {"out", "lse", "dq", "dk", "dv"};
  const std::vector<std::pair<StrategyKind, LayoutKind>> kinds = {
      {StrategyKind::Burst, LayoutKind::Zigzag},         {StrategyKind::Burst, LayoutKind::Contiguous},
      {StrategyKind::Ring, LayoutKind::Contiguous},      {StrategyKind::AllGather, LayoutKind::Zigzag},
      {StrategyKind::Ulysses, LayoutKind::Zigzag},       {StrategyKind::Usp, LayoutKind::Zigzag},
      {StrategyKind::DistFlash, LayoutKind::Contiguous}, {StrategyKind::HeadParallel, LayoutKind::Zigzag}};
  ProblemShape shape{1, kS, kH, kHkv, D};
  shape.dtype = dt;
  // The steps on the device's measured choice (Auto), forced onto cuDNN (the own kernels where
  // it does not take a step) and onto the own fast kernels; then cuDNN with a planted wrong mask,
  // which must break the bound somewhere. Auto and Cudnn may run cuDNN: their bound adds the
  // 2u · magnitude above (u = 2⁻⁸); Fast keeps the plain rule.
  struct Variant {
    const char* name;
    cuda::StepKernel kernel;
    bool plant;
  };
  const Variant variants[] = {{"auto", cuda::StepKernel::Auto, false},
                              {"fast", cuda::StepKernel::Fast, false},
                              {"cudnn", cuda::StepKernel::Cudnn, false},  // right before the planted one
                              {"cudnn with a planted wrong mask", cuda::StepKernel::Cudnn, true}};
  double local[5] = {0, 0, 0, 0, 0};
  for (const Variant& variant : variants) {
    device::CudaDevice::Options options;
    options.kernel = variant.kernel;
    options.plant_wrong_cudnn_mask = variant.plant;
    const auto dev = std::make_shared<const device::CudaDevice>(g_gpu, options);
    const double c = variant.kernel == cuda::StepKernel::Fast ? 0.0 : 2 * 0x1p-8;
    if (!variant.plant) {  // the planted run keeps the unplanted cuDNN run's single-process error
      AttentionParams gp;
      gp.mask = Mask::causal_mask();
      const std::vector<Tensor> single = bf16_run(
          *dev, q, k, v, dout,
          [&](const TensorView& a, const TensorView& b, const TensorView& cc, const TensorView& d,
              const TensorView& e) { entry::attention_forward_on(*dev, gpu, a, b, cc, d, e, gp); },
          [&](const TensorView& a, const TensorView& b, const TensorView& cc, const TensorView& d,
              const TensorView& e, const TensorView& f, const TensorView& h, const TensorView& i,
              const TensorView& j) {
            entry::attention_backward_on(*dev, gpu, a, b, cc, d, e, f, h, i, j, gp);
          });
      for (int i = 0; i < 5; ++i)
        local[i] = test::max_abs_diff(single[static_cast<std::size_t>(i)], *oracle[i]);
    }
    int broken = 0;  // elements beyond the bound on this rank (the planted run wants some)
    for (const auto& [strategy, layout_kind] : kinds) {
      // The planted run needs one strategy whose steps cuDNN takes (each device builds its own
      // cuDNN graphs, seconds where many): ring over contiguous blocks, every block full or causal.
      if (variant.plant && strategy != StrategyKind::Ring) continue;
      DistConfig cfg;
      cfg.strategy = strategy;
      cfg.layout = layout_kind;
      SCOPED_TRACE(std::string("bf16 kernel=") + variant.name + " strategy=" + to_string(strategy) +
                   " layout=" + to_string(layout_kind) + " P=" + std::to_string(world.size()));
      std::unique_ptr<DistAttention> attn;
      try {
        attn = std::make_unique<DistAttention>(world, cfg, shape, Mask::causal_mask(),
                                               DistAttention::OnDevice{dev, gpu});
      } catch (const Error& e) {  // headpar / ulysses with H % P != 0: refused on every rank
        ASSERT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
        continue;
      }
      const SequenceLayout& layout = attn->plan().layout();
      const std::vector<Tensor> got = bf16_run(
          *dev, test::shard_of(layout, rank, q), test::shard_of(layout, rank, k),
          test::shard_of(layout, rank, v), test::shard_of(layout, rank, dout),
          [&](const TensorView& a, const TensorView& b, const TensorView& cc, const TensorView& d,
              const TensorView& e) { attn->forward(a, b, cc, d, e); },
          [&](const TensorView& a, const TensorView& b, const TensorView& cc, const TensorView& d,
              const TensorView& e, const TensorView& f, const TensorView& h, const TensorView& i,
              const TensorView& j) { attn->backward(a, b, cc, d, e, f, h, i, j); });
      for (int i = 0; i < 5; ++i) {
        const bool rows = i == 1;
        const Tensor want =
            rows ? test::rows_of(layout, rank, *oracle[i]) : test::shard_of(layout, rank, *oracle[i]);
        const Tensor m = rows ? test::rows_of(layout, rank, mag[1])
                              : test::shard_of(layout, rank, mag[static_cast<std::size_t>(i)]);
        const double e = excess(got[static_cast<std::size_t>(i)], want, m, c);
        const double floor = 32 * test::kEps32 * std::max(1.0, test::max_abs(want));
        if (variant.plant) {
          broken += e > 2 * local[i] + floor ? 1 : 0;
        } else {
          EXPECT_LE(e, 2 * local[i] + floor) << names[i] << ": distributed bf16 error beyond " << c
                                             << " · magnitude vs the single-process GPU's " << local[i];
        }
      }
    }
    if (variant.kernel == cuda::StepKernel::Cudnn && cuda::cudnn_compiled()) {
      EXPECT_GT(dev->cudnn_executed(), 0) << variant.name << ": cuDNN never ran a step";
    }
    if (variant.plant) {
      int any = 0;
      MPI_Allreduce(&broken, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      if (cuda::cudnn_compiled()) { EXPECT_GT(any, 0) << "cuDNN under a planted wrong mask was not caught"; }
    }
  }
}

TEST(CudaDist, ANanInQIsRefusedOnEveryRank) {
  const auto dev = std::make_shared<const device::CudaDevice>(g_gpu);
  const Communicator world = Communicator::world();
  const ProblemShape shape{1, kS, kH, kHkv, kD};
  DistAttention attn(world, DistConfig{}, shape, Mask::causal_mask(),
                     DistAttention::OnDevice{dev, Device{DeviceKind::Cuda, g_gpu}});
  Tensor qh({1, attn.local_length(), kH, kD});
  if (world.rank() == 0)
    qh.vec()[static_cast<std::size_t>((1 * kH + 1) * kD + 7)] = std::nanf("");  // [0,1,1,7]
  const Tensor kh({1, attn.local_length(), kHkv, kD});
  const GpuTensor q(*dev, qh, true), k(*dev, kh, true), v(*dev, kh, true), out(*dev, qh, false),
      lse(*dev, Tensor({1, kH, attn.local_length()}), false);
  try {
    attn.forward(q.view, k.view, v.view, out.view, lse.view);
    ADD_FAILURE() << "a NaN in q was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("q holds a NaN or infinity at [0,1,1,7]"), std::string::npos)
        << e.what();
  }
  // Operands on the host are refused by the device DistAttention (check_device), on every rank.
  try {
    attn.forward(qh.view(), kh.view(), kh.view(), qh.view(), TensorView{});
    ADD_FAILURE() << "host operands were accepted";
  } catch (const Error& e) { EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what(); }
}

}  // namespace
}  // namespace burst

// MPI and GoogleTest: the rank's GPU is its local rank modulo the GPUs visible; without one on
// every rank, exit 77 (ctest: skipped). A test's verdict is the AND over ranks.
int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0, local = 0, count = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  const cudaError_t e = cudaGetDeviceCount(&count);
  int have = e == cudaSuccess && count > 0 ? 1 : 0, all_have = 0;
  MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (!all_have) {
    if (rank == 0)
      std::printf("SKIPPED: no usable CUDA GPU on every rank (%s)\n",
                  e == cudaSuccess ? "the driver reports 0 devices" : cudaGetErrorString(e));
    MPI_Finalize();
    return 77;
  }
  burst::g_gpu = local % count;
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int local_rc = RUN_ALL_TESTS();
  int rc = 0;
  MPI_Allreduce(&local_rc, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc == 0 ? 0 : 1;
}
