// src/device/cuda/mma_layout.h — where the register-resident forward (attention_fwd_mma.cu)
// finds its operands: the shared-memory row and column each lane hands to ldmatrix, and which
// element of an mma.sync.m16n8k16 accumulator a lane holds (internal, library burst_cuda;
// docs/gpu.md). Host and device code (BURST_HOST_DEVICE), so tests/test_cuda_mma_layout.cc
// checks these very formulas on the CPU against an emulation of ldmatrix and mma.sync written
// from the PTX ISA's fragment tables (§ "Matrix fragments for mma.m16n8k16", § ldmatrix).
//
// The PTX facts used (lane = 4·g + t, g = lane / 4, t = lane % 4):
//   * ldmatrix .x4: lanes 8i..8i+7 give the row addresses of 8×8 matrix i; lane l receives of
//     matrix i the pair (row l / 4, columns 2·(l % 4), +1) in register i; with .trans the pair
//     (rows 2·(l % 4), +1, column l / 4) — of the transposed matrix.
//   * A (16×16, row): registers (g, 2t..), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..).
//   * B (16×8, col): registers (rows 2t.., column g), (rows 2t + 8.., column g).
//   * C (16×8, fp32): elements (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
#pragma once

#include "burst/tensor.h"

namespace burst::cuda::mma_layout {

/// A row and a column (16-bit elements) of a row-major shared-memory tile.
struct RowCol {
  int row, col;
};

/// The row address lane gives to ldmatrix.x4 for warp `warp`'s A fragment of Q, columns
/// 16·kk..16·kk+15: matrices (rows 0–7, cols 0–7), (8–15, 0–7), (0–7, 8–15), (8–15, 8–15) of
/// its 16-row strip, i.e. A's four registers in order.
BURST_HOST_DEVICE constexpr RowCol q_address(int warp, int kk, int lane) {
  return {16 * warp + lane % 16, 16 * kk + (lane / 16) * 8};
}

/// The row address lane gives to ldmatrix.x4 (no .trans) on K [key][d] for the B fragments of
/// S = Q·Kᵀ of key blocks j and j + 1 (8 keys each), d columns 16·kk..16·kk+15: registers
/// (block j, d 0–7), (j, d 8–15), (j + 1, d 0–7), (j + 1, d 8–15).
BURST_HOST_DEVICE constexpr RowCol k_address(int j, int kk, int lane) {
  return {8 * j + (lane / 16) * 8 + lane % 8, 16 * kk + ((lane / 8) % 2) * 8};
}

/// The row address lane gives to ldmatrix.x4.trans on V [key][d] for the B fragments of O = P·V
/// over keys 16·kk..16·kk+15, d blocks n and n + 1 (8 columns each): registers (keys 0–7, block
/// n), (keys 8–15, n), (0–7, n + 1), (8–15, n + 1).
BURST_HOST_DEVICE constexpr RowCol v_address(int kk, int n, int lane) {
  return {16 * kk + ((lane / 8) % 2) * 8 + lane % 8, 8 * n + (lane / 16) * 8};
}

/// The row (0–15) and column (0–7) of element e (0–3) of a 16×8 accumulator that lane holds.
BURST_HOST_DEVICE constexpr RowCol accumulator_element(int lane, int e) {
  return {lane / 4 + 8 * (e / 2), 2 * (lane % 4) + e % 2};
}

/// A register of P·V's A fragment (keys 16·kk..16·kk+15) is a pair of score accumulator
/// elements: register r packs elements first, first + 1 (low, high) of key block 2·kk + block.
struct AccumulatorPair {
  int block, first;
};
BURST_HOST_DEVICE constexpr AccumulatorPair p_operand_source(int r) { return {r / 2, 2 * (r % 2)}; }

}  // namespace burst::cuda::mma_layout
