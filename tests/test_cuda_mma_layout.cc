// The register-resident forward's lane-to-element formulas (src/device/cuda/mma_layout.h) on the
// CPU: ldmatrix and mma.sync.m16n8k16 emulated per lane from the PTX ISA's fragment tables
// (written out below, independently of mma_layout.h), fed the addresses the kernel computes, must
// give S = Q·Kᵀ and then O = P·V exactly (small integers: every product and sum is exact in fp32).
// The kernel's loop structure is mirrored step by step (attention_fwd_mma.cu): Q's A fragments,
// K's B fragments two key blocks per ldmatrix.x4, the score accumulators repacked as P·V's A
// operand, V's B fragments through ldmatrix.x4.trans. Runs everywhere (no GPU): label cuda.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "device/cuda/mma_layout.h"

namespace burst::test {
namespace {

namespace ml = cuda::mma_layout;

constexpr int kLanes = 32;
using Pair = std::array<float, 2>;  // the two 16-bit elements of a 32-bit register
using Regs4 = std::array<Pair, 4>;  // an x4 ldmatrix result or an A fragment, one lane
using Acc = std::array<float, 4>;   // a 16×8 fp32 accumulator, one lane
using WarpRegs = std::array<Regs4, kLanes>;
using WarpAcc = std::array<Acc, kLanes>;

/// A row-major tile (rows × cols) of integers in [−2, 2] (seeded LCG).
struct Tile {
  int rows, cols;
  std::vector<float> x;
  float at(int r, int c) const { return x[static_cast<std::size_t>(r * cols + c)]; }
};
Tile tile(int rows, int cols, int seed) {
  Tile t{rows, cols, std::vector<float>(static_cast<std::size_t>(rows * cols))};
  std::uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(seed + 1);
  for (float& v : t.x) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int>((state >> 33) % 5) - 2);
  }
  return t;
}

/// ldmatrix.x4 (PTX ISA): lanes 8i..8i+7 address the rows of 8×8 matrix i; lane l gets, of
/// matrix i, (row l/4, cols 2(l%4), +1); .trans: (rows 2(l%4), +1, col l/4).
WarpRegs ldmatrix_x4(const Tile& t, const std::array<ml::RowCol, kLanes>& address, bool trans) {
  WarpRegs out{};
  for (int l = 0; l < kLanes; ++l)
    for (int i = 0; i < 4; ++i)
      for (int e = 0; e < 2; ++e) {
        if (!trans) {
          const ml::RowCol a = address[static_cast<std::size_t>(8 * i + l / 4)];
          out[l][i][e] = t.at(a.row, a.col + 2 * (l % 4) + e);
        } else {
          const ml::RowCol a = address[static_cast<std::size_t>(8 * i + 2 * (l % 4) + e)];
          out[l][i][e] = t.at(a.row, a.col + l / 4);
        }
      }
  return out;
}

/// mma.sync.m16n8k16.row.col (PTX ISA fragment tables), g = l/4, t = l%4: A registers (g, 2t..),
/// (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B registers (rows 2t.., col g), (rows 2t+8.., col g);
/// C elements (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
void mma(WarpAcc& c, const std::array<std::array<Pair, 4>, kLanes>& a, const std::array<Pair, kLanes>& b0,
         const std::array<Pair, kLanes>& b1) {
  float A[16][16] = {}, B[16][8] = {};
  for (int l = 0; l < kLanes; ++l) {
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * t + e] = a[l][0][e];
      A[g + 8][2 * t + e] = a[l][1][e];
      A[g][2 * t + 8 + e] = a[l][2][e];
      A[g + 8][2 * t + 8 + e] = a[l][3][e];
      B[2 * t + e][g] = b0[l][e];
      B[2 * t + 8 + e][g] = b1[l][e];
    }
  }
  for (int l = 0; l < kLanes; ++l) {
    const int g = l / 4, t = l % 4;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int e = 0; e < 4; ++e)
      for (int k = 0; k < 16; ++k) c[l][e] += A[rows[e]][k] * B[k][cols[e]];
  }
}

std::array<Pair, kLanes> reg(const WarpRegs& r, int i) {
  std::array<Pair, kLanes> out{};
  for (int l = 0; l < kLanes; ++l) out[l] = r[l][i];
  return out;
}

TEST(CudaMmaLayout, AccumulatorElementsAreThePtxTable) {
  for (int l = 0; l < kLanes; ++l)
    for (int e = 0; e < 4; ++e) {
      const ml::RowCol rc = ml::accumulator_element(l, e);
      EXPECT_EQ(rc.row, l / 4 + (e >= 2 ? 8 : 0)) << "lane " << l << " element " << e;
      EXPECT_EQ(rc.col, 2 * (l % 4) + (e % 2)) << "lane " << l << " element " << e;
    }
}

// One warp's 16 query rows of a 64 × D tile against a 64-key tile, as the kernel loops.
void check_warp(int D, int warp) {
  SCOPED_TRACE("D " + std::to_string(D) + ", warp " + std::to_string(warp));
  constexpr int kKeys = 64, kNb = kKeys / 8;
  const Tile Q = tile(64, D, 1), K = tile(kKeys, D, 2), V = tile(kKeys, D, 3);

  // S = Q·Kᵀ: sc[j] is the accumulator of key block j (keys 8j..8j+7).
  std::vector<WarpAcc> sc(kNb, WarpAcc{});
  for (int kk = 0; kk < D / 16; ++kk) {
    std::array<ml::RowCol, kLanes> qa{};
    for (int l = 0; l < kLanes; ++l) qa[l] = ml::q_address(warp, kk, l);
    const WarpRegs qf = ldmatrix_x4(Q, qa, false);
    for (int j = 0; j < kNb; j += 2) {
      std::array<ml::RowCol, kLanes> ka{};
      for (int l = 0; l < kLanes; ++l) ka[l] = ml::k_address(j, kk, l);
      const WarpRegs kb = ldmatrix_x4(K, ka, false);
      mma(sc[static_cast<std::size_t>(j)], qf, reg(kb, 0), reg(kb, 1));
      mma(sc[static_cast<std::size_t>(j + 1)], qf, reg(kb, 2), reg(kb, 3));
    }
  }
  std::vector<float> S(16 * kKeys, 0.0f);  // this warp's rows of Q·Kᵀ, by definition
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < kKeys; ++k) {
      float s = 0;
      for (int d = 0; d < D; ++d) s += Q.at(16 * warp + r, d) * K.at(k, d);
      S[static_cast<std::size_t>(r * kKeys + k)] = s;
    }
  for (int j = 0; j < kNb; ++j)
    for (int l = 0; l < kLanes; ++l)
      for (int e = 0; e < 4; ++e) {
        const ml::RowCol rc = ml::accumulator_element(l, e);
        ASSERT_EQ(sc[static_cast<std::size_t>(j)][l][e],
                  S[static_cast<std::size_t>(rc.row * kKeys + 8 * j + rc.col)])
            << "S: key block " << j << ", lane " << l << ", element " << e;
      }

  // O = P·V with P = the score accumulators repacked as A fragments (no trip through memory).
  std::vector<WarpAcc> o(static_cast<std::size_t>(D / 8), WarpAcc{});
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    std::array<std::array<Pair, 4>, kLanes> pa{};
    for (int l = 0; l < kLanes; ++l)
      for (int r = 0; r < 4; ++r) {
        const ml::AccumulatorPair src = ml::p_operand_source(r);
        const Acc& acc = sc[static_cast<std::size_t>(2 * kk + src.block)][l];
        pa[l][r] = {acc[static_cast<std::size_t>(src.first)], acc[static_cast<std::size_t>(src.first + 1)]};
      }
    for (int n = 0; n < D / 8; n += 2) {
      std::array<ml::RowCol, kLanes> va{};
      for (int l = 0; l < kLanes; ++l) va[l] = ml::v_address(kk, n, l);
      const WarpRegs vb = ldmatrix_x4(V, va, true);
      mma(o[static_cast<std::size_t>(n)], pa, reg(vb, 0), reg(vb, 1));
      mma(o[static_cast<std::size_t>(n + 1)], pa, reg(vb, 2), reg(vb, 3));
    }
  }
  for (int n = 0; n < D / 8; ++n)
    for (int l = 0; l < kLanes; ++l)
      for (int e = 0; e < 4; ++e) {
        const ml::RowCol rc = ml::accumulator_element(l, e);
        float want = 0;
        for (int k = 0; k < kKeys; ++k)
          want += S[static_cast<std::size_t>(rc.row * kKeys + k)] * V.at(k, 8 * n + rc.col);
        ASSERT_EQ(o[static_cast<std::size_t>(n)][l][e], want)
            << "O: column block " << n << ", lane " << l << ", element " << e;
      }
}

TEST(CudaMmaLayout, EmulatedFragmentsGiveQKtThenPV) {
  for (int D : {64, 128})
    for (int warp = 0; warp < 4; ++warp) check_warp(D, warp);
}

// The check can fail: the rows of Q·Kᵀ are pairwise distinct, and so are its columns and V's,
// so a formula that sends a lane to the wrong query row, key or output column changes a value.
TEST(CudaMmaLayout, TheDataTellEveryRowAndColumnApart) {
  for (int D : {64, 128}) {
    const Tile Q = tile(64, D, 1), K = tile(64, D, 2), V = tile(64, D, 3);
    std::vector<std::vector<float>> rows(64, std::vector<float>(64)), cols(64, std::vector<float>(64)),
        vcols(static_cast<std::size_t>(D), std::vector<float>(64));
    for (int r = 0; r < 64; ++r)
      for (int k = 0; k < 64; ++k) {
        float s = 0;
        for (int d = 0; d < D; ++d) s += Q.at(r, d) * K.at(k, d);
        rows[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)] = s;
        cols[static_cast<std::size_t>(k)][static_cast<std::size_t>(r)] = s;
      }
    for (int d = 0; d < D; ++d)
      for (int k = 0; k < 64; ++k)
        vcols[static_cast<std::size_t>(d)][static_cast<std::size_t>(k)] = V.at(k, d);
    for (const auto* set : {&rows, &cols, &vcols})
      for (std::size_t a = 0; a < set->size(); ++a)
        for (std::size_t b = a + 1; b < set->size(); ++b)
          ASSERT_NE((*set)[a], (*set)[b]) << "D " << D << ": " << a << ", " << b;
  }
}

}  // namespace
}  // namespace burst::test
