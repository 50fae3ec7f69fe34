// src/kernels/amx_tiles.h — the AMX tile configuration shared by the two tile layers
// (microkernels_amx.cc: the instructions; microkernels_amx_emulated.cc: their software model).
// The layout is LDTILECFG's 64-byte memory operand, palette 1 (Intel SDM vol. 2, LDTILECFG):
// 8 tiles, each up to 16 rows × 64 bytes.
#pragma once

#include <cstdint>

namespace burst::kernels {

struct TileConfig {
  std::uint8_t palette_id = 0;  ///< 1: 8 tiles of ≤ 16 rows × 64 B (0 = tiles off)
  std::uint8_t start_row = 0;   ///< restart row of an interrupted tile load/store (0)
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};  ///< bytes per row of tile i (≤ 64)
  std::uint8_t rows[16] = {};    ///< rows of tile i (≤ 16)
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG takes a 64-byte operand");

}  // namespace burst::kernels
