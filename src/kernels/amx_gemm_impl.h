// src/kernels/amx_gemm_impl.h — the one body of the AMX bf16 GEMM, on a tile layer.
//
// Included by microkernels_amx.cc (TilesT = the AMX instructions) and microkernels_amx_emulated.cc
// (TilesT = a software model of the same instructions) INSIDE an anonymous namespace, after each
// defines `struct TilesT`, so every instantiation has internal linkage (no AMX-compiled code can
// be merged by the linker into code that runs on a CPU without AMX) — the pattern of
// microkernels_impl.h, and for the same reason no std:: templates are called here.
// TilesT (the thin tile layer; both implementations have the semantics of the Intel SDM's
// LDTILECFG, TILEZERO, TILELOADD, TILESTORED, TDPBF16PS, TILERELEASE):
//   explicit TilesT(const TileConfig&)  — ldtilecfg;  ~TilesT() — tilerelease
//   template <int T> zero(); load(const void*, stride_bytes); store(void*, stride_bytes)
//   template <int C, int A, int B> dp()  — C[m][n] += Σ_k A[m][2k]·B[k][2n] + A[m][2k+1]·B[k][2n+1]
// Tiles used: C 0–3 (a 2×2 block of 16×16 fp32), A 4–5 (16 rows × 32 bf16), B 6–7 (16 pair rows
// × 16 columns × 2 bf16: exactly the pair-packed "VNNI" layout of Microkernels::gemm_bf16's B,
// so the fused kernels' packs are the tile operands as they are). Every tile is 16 rows × 64 B.
// (No #pragma once: intentionally included once per tile-layer translation unit.)

constexpr int kTileRows = 16;   // rows of every tile
constexpr int kTileBytes = 64;  // bytes per tile row: 16 fp32 or 32 bf16 (16 pairs)

inline int tmin(int a, int b) { return a < b ? a : b; }

// Copies rows × n 16-bit elements (row stride ld) into a zeroed 16 × 32 tile buffer.
inline void stage16(const std::uint16_t* src, std::int64_t ld, int rows, int n, std::uint16_t* buf) {
  for (int i = 0; i < kTileRows * 32; ++i) buf[i] = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < n; ++c) buf[r * 32 + c] = src[r * ld + c];
}

// A tile i (4 + i) of rows [m0, m0 + mr) and reduction columns [k0, k0 + kc).
template <int T>
void load_a(TilesT& t, const std::uint16_t* A, std::int64_t lda, int m0, int mr, int k0, int kc,
            std::uint16_t* buf) {
  const std::uint16_t* src = A + m0 * lda + k0;
  if (mr == kTileRows && kc == 32) {
    t.template load<T>(src, lda * 2);
  } else {
    stage16(src, lda, mr, kc, buf);
    t.template load<T>(buf, kTileBytes);
  }
}

// B tile (6 + j) of pair rows [k0/2, (k0 + kc)/2) and columns [n0, n0 + nr) (2 bf16 each).
template <int T>
void load_b(TilesT& t, const std::uint16_t* Bp, std::int64_t ldb, int n0, int nr, int k0, int kc,
            std::uint16_t* buf) {
  const std::uint16_t* src = Bp + (k0 / 2) * ldb + 2 * n0;
  if (nr == 16 && kc == 32) {
    t.template load<T>(src, ldb * 2);
  } else {
    stage16(src, ldb, kc / 2, 2 * nr, buf);
    t.template load<T>(buf, kTileBytes);
  }
}

template <int T>
void store_c(TilesT& t, float* C, std::int64_t ldc, int m0, int mr, int n0, int nr, bool direct,
             bool accumulate, float alpha, float* buf) {
  if (direct) {
    t.template store<T>(C + m0 * ldc + n0, ldc * 4);
    return;
  }
  t.template store<T>(buf, kTileBytes);
  for (int r = 0; r < mr; ++r) {
    float* c = C + (m0 + r) * ldc + n0;
    for (int n = 0; n < nr; ++n) c[n] = (accumulate ? c[n] : 0.0f) + alpha * buf[r * 16 + n];
  }
}

// Microkernels::gemm_bf16 on tiles: C[M×N] = alpha·A·B (accumulate=false) or C += alpha·A·B;
// A bf16 rows [M][K] (lda), B pair-packed [K/2][N][2] (ldb in bf16 elements), K even.
// Full 32×32 blocks with alpha = 1 keep C in the tiles from memory to memory; edge blocks (M, N
// or K not multiples of the tile) go through zero-padded staging buffers, so no tile reads or
// writes outside the operands.
void amx_gemm_bf16(const std::uint16_t* A, std::int64_t lda, const std::uint16_t* Bp, std::int64_t ldb,
                   float* C, std::int64_t ldc, int M, int N, int K, bool accumulate, float alpha) {
  TileConfig cfg{};
  cfg.palette_id = 1;
  for (int i = 0; i < 8; ++i) {
    cfg.rows[i] = kTileRows;
    cfg.colsb[i] = kTileBytes;
  }
  TilesT t(cfg);
  alignas(64) std::uint16_t abuf[2][kTileRows * 32];
  alignas(64) std::uint16_t bbuf[2][kTileRows * 32];
  alignas(64) float cbuf[kTileRows * 16];
  for (int m0 = 0; m0 < M; m0 += 32) {
    const int mr0 = tmin(16, M - m0), mr1 = tmin(16, M - m0 - 16);  // mr1 ≤ 0: one row tile
    for (int n0 = 0; n0 < N; n0 += 32) {
      const int nr0 = tmin(16, N - n0), nr1 = tmin(16, N - n0 - 16);
      const bool two_m = mr1 > 0, two_n = nr1 > 0;
      const bool full = mr0 == 16 && mr1 == 16 && nr0 == 16 && nr1 == 16;
      const bool direct = full && alpha == 1.0f;
      if (direct && accumulate) {
        t.template load<0>(C + m0 * ldc + n0, ldc * 4);
        t.template load<1>(C + m0 * ldc + n0 + 16, ldc * 4);
        t.template load<2>(C + (m0 + 16) * ldc + n0, ldc * 4);
        t.template load<3>(C + (m0 + 16) * ldc + n0 + 16, ldc * 4);
      } else {
        t.template zero<0>();
        t.template zero<1>();
        t.template zero<2>();
        t.template zero<3>();
      }
      for (int k0 = 0; k0 < K; k0 += 32) {
        const int kc = tmin(32, K - k0);
        load_a<4>(t, A, lda, m0, mr0, k0, kc, abuf[0]);
        if (two_m) load_a<5>(t, A, lda, m0 + 16, mr1, k0, kc, abuf[1]);
        load_b<6>(t, Bp, ldb, n0, nr0, k0, kc, bbuf[0]);
        if (two_n) load_b<7>(t, Bp, ldb, n0 + 16, nr1, k0, kc, bbuf[1]);
        t.template dp<0, 4, 6>();
        if (two_n) t.template dp<1, 4, 7>();
        if (two_m) t.template dp<2, 5, 6>();
        if (two_m && two_n) t.template dp<3, 5, 7>();
      }
      store_c<0>(t, C, ldc, m0, mr0, n0, nr0, direct, accumulate, alpha, cbuf);
      if (two_n) store_c<1>(t, C, ldc, m0, mr0, n0 + 16, nr1, direct, accumulate, alpha, cbuf);
      if (two_m) store_c<2>(t, C, ldc, m0 + 16, mr1, n0, nr0, direct, accumulate, alpha, cbuf);
      if (two_m && two_n) store_c<3>(t, C, ldc, m0 + 16, mr1, n0 + 16, nr1, direct, accumulate, alpha, cbuf);
    }
  }
}
