// The GPU attention step kernels (src/device/cuda/attention_cuda.h) against the fp64 oracle on
// the same bf16 / fp16-rounded inputs, and the fast kernel against its reference twin
// (tests/cuda_attention_harness.h has the bounds: those of tests/test_attention_bf16.cc, the
// bf16-arithmetic terms for the fast kernel, whose P and dS are rounded before their products).
// CudaAttention.* need a GPU: without one they report SKIPPED with the driver's reason and the
// binary exits 77 (ctest: skipped). CudaMaskTable.* run everywhere: the slice-table functions
// the kernels use (mask_table.h) against ResolvedMask, and the fast kernel's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "burst/error.h"
#include "burst/mask.h"
#include "cuda_attention_harness.h"
#include "cuda_test_util.h"
#include "device/cuda/attention_cuda.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_memory.h"
#include "device/cuda/mask_table.h"

namespace burst::test {
namespace {

// ---------------------------------------------------------------- the slice table (host)

BenchmarkMaskConfig small_config() {
  BenchmarkMaskConfig cfg;
  cfg.seed = 5;
  cfg.num_documents = 4;
  cfg.block = 16;
  cfg.window = 20;
  return cfg;
}

// Two overlapping one-row slices a row (its causal keys in two pieces): 2·S slices, so more
// than the 64 a block keeps in shared memory meet every 64-row and every 64-key tile past the
// first — the fast kernels read the global table then.
Mask many_row_slices(std::int64_t S) {
  std::vector<MaskSlice> slices;
  for (std::int64_t i = 0; i < S; ++i) {
    slices.push_back({i, i + 1, 0, i / 2 + 1, SliceKind::Full, -1, -1});
    slices.push_back({i, i + 1, i / 2, i + 1, SliceKind::Full, -1, -1});
  }
  return Mask::from_slices(std::move(slices));
}

struct NamedMask {
  std::string name;
  Mask mask;
  std::int64_t S_q, S_kv;
};

std::vector<NamedMask> masks_to_check(std::int64_t S) {
  std::vector<NamedMask> out;
  for (MaskType t : all_mask_types())
    out.push_back({to_string(t), make_benchmark_mask(t, S, small_config()), S, S});
  out.push_back({"window(30, 10)", Mask::sliding_window(30, 10), S, S});
  out.push_back({"causal window 20", Mask::sliding_window(20, 0, true), S, S});
  out.push_back({"causal, S_q < S_kv", Mask::causal_mask(), S / 2 + 3, S});
  out.push_back({"causal, S_q > S_kv", Mask::causal_mask(), S, S / 2 + 3});
  out.push_back({"inverse and bi-causal slices",
                 Mask::from_slices({{0, S / 2, 0, S, SliceKind::InvCausal, -1, -1},
                                    {S / 2, S, S / 3, S, SliceKind::BiCausal, 7, 5}}),
                 S, S});
  out.push_back({"two slices a row", many_row_slices(S), S, S});
  return out;
}

TEST(CudaMaskTable, VisibilityIsResolvedMasksForEveryPair) {
  for (const NamedMask& m : masks_to_check(150)) {
    SCOPED_TRACE(m.name);
    const ResolvedMask r(m.mask, m.S_q, m.S_kv);
    const auto n = static_cast<std::int64_t>(r.slices().size());
    for (std::int64_t q = 0; q < m.S_q; ++q)
      for (std::int64_t k = 0; k < m.S_kv; ++k)
        ASSERT_EQ(r.visible(q, k), cuda::table_visible(r.slices().data(), n, q, k))
            << "(q, k) " << q << ", " << k;
  }
}

// Tile classes: equal to ResolvedMask::classify, and the Empty / Full claims exact over the hulls.
TEST(CudaMaskTable, TileClassesAreResolvedMasksAndTheirClaimsHold) {
  for (const NamedMask& m : masks_to_check(150)) {
    SCOPED_TRACE(m.name);
    const ResolvedMask r(m.mask, m.S_q, m.S_kv);
    const auto n = static_cast<std::int64_t>(r.slices().size());
    for (std::int64_t tq : {1, 7, 16, 64})
      for (std::int64_t tk : {1, 9, 64})
        for (std::int64_t q0 = 0; q0 < m.S_q; q0 += tq)
          for (std::int64_t k0 = 0; k0 < m.S_kv; k0 += tk) {
            const std::int64_t q1 = std::min(m.S_q, q0 + tq) - 1, k1 = std::min(m.S_kv, k0 + tk) - 1;
            const TileClass c = cuda::table_classify(r.slices().data(), n, q0, q1, k0, k1);
            ASSERT_EQ(static_cast<int>(r.classify(q0, q1, k0, k1)), static_cast<int>(c))
                << "tile " << q0 << ".." << q1 << " x " << k0 << ".." << k1;
            if (c == TileClass::Partial) continue;
            for (std::int64_t q = q0; q <= q1; ++q)
              for (std::int64_t k = k0; k <= k1; ++k)
                ASSERT_EQ(c == TileClass::Full, r.visible(q, k)) << "(q, k) " << q << ", " << k;
          }
  }
}

TEST(CudaMaskTable, FastKernelNamesWhatItRefuses) {
  std::vector<float> x(1);
  auto v = [&](DType dt, std::int64_t D) {
    TensorView t = make_view(static_cast<const void*>(x.data()), dt, {1, 1, 1, D});
    t.stride = {0, 0, 0, 1};
    return t;
  };
  EXPECT_NE(cuda::fast_unsupported(v(DType::F32, 64), v(DType::F32, 64), v(DType::F32, 64)).find("reference"),
            std::string::npos);
  EXPECT_NE(
      cuda::fast_unsupported(v(DType::BF16, 96), v(DType::BF16, 96), v(DType::BF16, 96)).find("64 and 128"),
      std::string::npos);
  EXPECT_NE(
      cuda::fast_unsupported(v(DType::BF16, 64), v(DType::F16, 64), v(DType::BF16, 64)).find("one dtype"),
      std::string::npos);
  TensorView wide = v(DType::BF16, 64);  // B past gridDim.z's 65535
  wide.shape[0] = 70000;
  EXPECT_NE(cuda::fast_unsupported(wide, v(DType::BF16, 64), v(DType::BF16, 64)).find("65535"),
            std::string::npos);
}

// ---------------------------------------------------------------- kernels (GPU)

class CudaAttention : public OnCudaDevice {};

// S = 200: three full 64-row tiles and a ragged one; the masks' slices cut tiles anywhere.
TEST_F(CudaAttention, EveryMaskTypeFastAndTwinMatchTheOracle) {
  for (MaskType t : all_mask_types())
    check_both(gpu_case(to_string(t), 2, 1, 200, 200, 64, make_benchmark_mask(t, 200, small_config())));
}

TEST_F(CudaAttention, ShorthandsDocumentsCrossLengthsAndEdgeSizes) {
  check_both(gpu_case("window(30, 10)", 2, 2, 190, 190, 64, Mask::sliding_window(30, 10)));
  check_both(gpu_case("causal window 40", 2, 1, 190, 190, 64, Mask::sliding_window(40, 0, true)));
  check_both(gpu_case("causal, S_q < S_kv", 2, 1, 100, 230, 64, Mask::causal_mask()));
  check_both(gpu_case("causal, S_q > S_kv", 2, 1, 230, 100, 64, Mask::causal_mask()));
  check_both(gpu_case("documents, causal", 2, 1, 250, 250, 64, Mask::document({0, 30, 31, 130, 250}, true)));
  check_both(gpu_case("documents, full", 2, 1, 250, 250, 64, Mask::document({0, 64, 100, 250}, false)));
  for (std::int64_t S : {1, 63, 64, 65, 129})
    check_both(gpu_case("full S " + std::to_string(S), 1, 1, S, S, 64, Mask::full()));
  // Rows 50..119 see no key (lse −inf, out and dq 0); key tiles 64..127 are empty for every row.
  check_both(gpu_case("rows without keys", 2, 1, 200, 200, 64,
                      Mask::from_slices({{0, 50, 0, 64, SliceKind::Causal, -1, -1},
                                         {120, 200, 128, 200, SliceKind::Full, -1, -1}})));
  // 400 slices: past the 64 a block keeps in shared memory (the global-table path).
  check_both(gpu_case("two slices a row", 2, 1, 200, 200, 64, many_row_slices(200)));
}

TEST_F(CudaAttention, GqaHeadDimsAndFp16) {
  check_both(gpu_case("D 128, GQA 8/2, causal", 8, 2, 150, 150, 128, Mask::causal_mask()));
  check_both(
      gpu_case("D 128, documents", 4, 1, 140, 140, 128, Mask::document({0, 70, 140}, true), DType::F16));
  check_both(gpu_case("D 64, MHA, full, fp16", 4, 4, 130, 130, 64, Mask::full(), DType::F16));
  GpuCase batched = gpu_case("B 2, D 128, window", 4, 2, 100, 100, 128, Mask::sliding_window(25, 25));
  batched.B = 2;
  check_both(batched);
}

// Longer rows: the online softmax rescales across 16 key tiles; whole tiles skipped off the band.
TEST_F(CudaAttention, LongerRowsAcrossManyKeyTiles) {
  check_both(gpu_case("S 1000, D 128, causal", 2, 1, 1000, 1000, 128, Mask::causal_mask()));
  check_both(
      gpu_case("S 1000, D 64, causal window 150", 2, 1, 1000, 1000, 64, Mask::sliding_window(150, 0, true)));
}

// A rank's slice of a longer sequence: zigzag (rank 0 of 2: chunks 0 and 3 of 4) queries against
// rank 1's keys, and striped positions; device tensors in SDPA's [B,H,S,D] memory order; views
// off the 16-byte alignment the vector loads need.
TEST_F(CudaAttention, GappedPositionsAndSdpaStrides) {
  GpuCase zig = gpu_case("zigzag, causal", 2, 1, 128, 128, 64, Mask::causal_mask());
  for (std::int64_t i = 0; i < 64; ++i) zig.q_pos.push_back(i);
  for (std::int64_t i = 192; i < 256; ++i) zig.q_pos.push_back(i);
  for (std::int64_t i = 64; i < 192; ++i) zig.kv_pos.push_back(i);
  zig.seq_q_global = zig.seq_kv_global = 256;
  zig.sdpa_layout = true;
  check_both(zig);
  GpuCase striped = gpu_case("striped, causal, D 128", 2, 2, 100, 100, 128, Mask::causal_mask());
  for (std::int64_t i = 0; i < 100; ++i) {
    striped.q_pos.push_back(2 * i + 1);
    striped.kv_pos.push_back(2 * i);
  }
  striped.seq_q_global = striped.seq_kv_global = 200;
  striped.sdpa_layout = true;
  check_both(striped);
  // Views 2 bytes past a 16-byte boundary: the tile loads take their 2-byte path (every other
  // case is aligned, so only these run it).
  GpuCase unaligned = gpu_case("unaligned views, causal", 2, 1, 150, 150, 64, Mask::causal_mask());
  unaligned.unaligned = true;
  check_both(unaligned);
  GpuCase unaligned_sdpa = gpu_case("unaligned SDPA views, window, D 128, fp16", 4, 2, 100, 100, 128,
                                    Mask::sliding_window(30, 5), DType::F16);
  unaligned_sdpa.unaligned = unaligned_sdpa.sdpa_layout = true;
  check_both(unaligned_sdpa);
}

// fp32 operands run on the twin (Auto), the fast kernel refuses them by name; D = 96 likewise.
TEST_F(CudaAttention, Fp32OperandsAndOtherHeadDimsRunOnTheTwin) {
  for (std::int64_t D : {64, 96}) {
    SCOPED_TRACE("D " + std::to_string(D));
    const GpuCase c = gpu_case("fp32", 2, 1, 90, 90, D, Mask::causal_mask(), DType::F32);
    const Tensor q = random_tensor(c.qs(), 1), k = random_tensor(c.ks(), 2), v = random_tensor(c.ks(), 3);
    Tensor out(c.qs()), lse({c.B, c.H, c.S_q});
    DevTensor dq = to_device(q.data(), DType::F32, c.qs(), false),
              dk = to_device(k.data(), DType::F32, c.ks(), false),
              dv = to_device(v.data(), DType::F32, c.ks(), false), dout = poisoned(DType::F32, c.qs(), false),
              dlse = poisoned(DType::F32, {c.B, c.H, c.S_q}, false);
    const auto pos = c.positions(true);
    const ResolvedMask mask(c.mask, c.S_q, c.S_kv);
    const kernels::KernelArgs args =
        kernel_args(pos, pos, mask, static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))));
    for (cuda::StepKernel fast : {cuda::StepKernel::Fast, cuda::StepKernel::FastMma})
      EXPECT_THROW(cuda::step_forward(dq.view, dk.view, dv.view, dout.view, dlse.view, args, nullptr, fast),
                   Error);
    cuda::step_forward(dq.view, dk.view, dv.view, dout.view, dlse.view, args, nullptr,
                       cuda::StepKernel::Auto);
    cuda::check(cudaDeviceSynchronize(), "forward");
    from_device(dout, out.data());
    from_device(dlse, lse.data());
    const AttentionParams p = oracle_params(c, pos, pos);
    const AttentionOutput ref = attention_forward(q.view(), k.view(), v.view(), p);
    const AttentionOutput naive = naive_fp32_forward(q, k, v, p);
    EXPECT_TRUE(within_tolerance("out", out, ref.out, naive.out));
    EXPECT_TRUE(within_tolerance("lse", lse, ref.lse, naive.lse));
  }
}

// accumulate: the gradients are added into fp32 dq, dk, dv (not overwritten), by both kernels;
// written fresh, fp32 gradients (the fast backward's atomics straight into dq, zeroed first)
// meet the oracle's bounds (lse and delta from the kernel's own forward).
TEST_F(CudaAttention, AccumulateAddsIntoFp32Gradients) {
  const GpuCase c = gpu_case("accumulate", 4, 2, 150, 150, 64, Mask::causal_mask());
  const GpuInputs in = inputs_of(c);
  const auto pos = c.positions(true);
  const ResolvedMask mask(c.mask, c.S_q, c.S_kv);
  const kernels::KernelArgs args = kernel_args(pos, pos, mask, 0.125f);
  const std::vector<std::int64_t> rs{c.B, c.H, c.S_q};
  for (cuda::StepKernel which : {cuda::StepKernel::Reference, cuda::StepKernel::Fast}) {
    SCOPED_TRACE(which == cuda::StepKernel::Fast ? "fast" : "reference");
    GpuResults base = run_case(c, in, which);  // out, lse, delta of this kernel's forward
    const Tensor& lse = base.lse;
    const Tensor& delta = base.delta;
    std::vector<Tensor> fresh, added;
    for (bool accumulate : {false, true}) {
      std::vector<Tensor> init{random_tensor(c.qs(), 31), random_tensor(c.ks(), 32),
                               random_tensor(c.ks(), 33)};
      DevTensor q = to_device(in.q.bits.data(), c.dt, c.qs(), false),
                k = to_device(in.k.bits.data(), c.dt, c.ks(), false),
                v = to_device(in.v.bits.data(), c.dt, c.ks(), false),
                g = to_device(in.g.bits.data(), c.dt, c.qs(), false),
                l = to_device(lse.data(), DType::F32, rs, false),
                d = to_device(delta.data(), DType::F32, rs, false),
                gq = to_device(init[0].data(), DType::F32, c.qs(), false),
                gk = to_device(init[1].data(), DType::F32, c.ks(), false),
                gv = to_device(init[2].data(), DType::F32, c.ks(), false);
      cuda::step_backward(g.view, q.view, k.view, v.view, l.view, d.view, gq.view, gk.view, gv.view, args,
                          accumulate, nullptr, which);
      cuda::check(cudaDeviceSynchronize(), "backward");
      (accumulate ? added : fresh) = gradients_written(c, gq, gk, gv, init, accumulate);
    }
    // Same sums up to fp32 rounding of the additions (atomics add dQ in no fixed order).
    for (std::size_t t = 0; t < 3; ++t) {
      const double scale = std::max(1.0, max_abs(fresh[t]));
      EXPECT_LE(max_abs_diff(added[t], fresh[t]), 64 * kEps32 * scale) << "gradient " << t;
      EXPECT_GT(max_abs(fresh[t]), 0.0) << "gradient " << t << " is all zero";
    }
    base.dq.wide = fresh[0];
    base.dk.wide = fresh[1];
    base.dv.wide = fresh[2];
    check_case(c, in, base, which == cuda::StepKernel::Fast);
  }
}

// The device seam runs these kernels: CudaDevice::step_forward forced onto Fast
// (Options::kernel; Auto would time Fast against FastMma) with KernelImpl Tiled (→ Fast, the wmma
// kernel) and Reference (→ twin), positions and slice table in device memory, give the bytes of
// the direct calls with host tables.
TEST_F(CudaAttention, SeamRunsTheSameKernelsWithDeviceTables) {
  const GpuCase c = gpu_case("seam", 2, 1, 130, 130, 64, Mask::sliding_window(40, 0, true));
  const GpuInputs in = inputs_of(c);
  const auto pos = c.positions(true);
  const ResolvedMask mask(c.mask, c.S_q, c.S_kv);
  device::CudaDevice::Options fast;
  fast.kernel = cuda::StepKernel::Fast;
  device::CudaDevice gpu(0, fast);
  cuda::DeviceBuffer pos_d(0, pos.size() * 8), slices_d(0, mask.slices().size() * sizeof(MaskSlice));
  pos_d.upload(pos.data(), pos_d.bytes());
  slices_d.upload(mask.slices().data(), slices_d.bytes());
  for (KernelImpl impl : {KernelImpl::Tiled, KernelImpl::Reference}) {
    SCOPED_TRACE(to_string(impl));
    kernels::KernelParams p;
    p.impl = impl;
    p.scale = 0.125f;
    p.q_pos = p.kv_pos = static_cast<const std::int64_t*>(pos_d.data());
    p.mask_slices = static_cast<const MaskSlice*>(slices_d.data());
    p.mask_slice_count = static_cast<std::int64_t>(mask.slices().size());
    kernels::KernelArgs host = p;
    host.q_pos = host.kv_pos = pos.data();
    host.mask_slices = mask.slices().data();
    const std::vector<std::int64_t> rs{c.B, c.H, c.S_q};
    std::vector<std::uint16_t> out_seam(in.q.bits.size()), out_direct(in.q.bits.size());
    DevTensor q = to_device(in.q.bits.data(), c.dt, c.qs(), false),
              k = to_device(in.k.bits.data(), c.dt, c.ks(), false),
              v = to_device(in.v.bits.data(), c.dt, c.ks(), false), o1 = poisoned(c.dt, c.qs(), false),
              o2 = poisoned(c.dt, c.qs(), false);
    Tensor lse1(rs), lse2(rs);
    DevTensor l1 = poisoned(DType::F32, rs, false), l2 = poisoned(DType::F32, rs, false);
    gpu.step_forward(q.view, k.view, v.view, o1.view, l1.view, p);
    gpu.wait(gpu.record());
    cuda::step_forward(q.view, k.view, v.view, o2.view, l2.view, host, nullptr,
                       impl == KernelImpl::Reference ? cuda::StepKernel::Reference : cuda::StepKernel::Fast);
    cuda::check(cudaDeviceSynchronize(), "forward");
    from_device(o1, out_seam.data());
    from_device(o2, out_direct.data());
    from_device(l1, lse1.data());
    from_device(l2, lse2.data());
    EXPECT_EQ(out_seam, out_direct);
    // Both written (the buffers start as 0xFF bytes; every row of this mask sees its own key).
    EXPECT_EQ(std::count(out_seam.begin(), out_seam.end(), std::uint16_t{0xFFFF}), 0);
    EXPECT_TRUE(
        std::all_of(lse1.data(), lse1.data() + lse1.numel(), [](float x) { return std::isfinite(x); }));
    EXPECT_EQ(0,
              std::memcmp(lse1.data(), lse2.data(), sizeof(float) * static_cast<std::size_t>(lse1.numel())));
  }
}

}  // namespace
}  // namespace burst::test

int main(int argc, char** argv) { return burst::test::run_cuda_tests(argc, argv); }
