// src/kernels/microkernels.h — the only SIMD code of burst: tile GEMMs, the vectorised exp2 and
// the element-wise softmax steps of the tiled kernel, one table per instruction set.
//
// Owns: a table of function pointers per ISA (AVX-512, AVX2+FMA, portable C++; AVX512-BF16 =
// the AVX-512 table plus the bf16 dot-product entries, microkernels_avx512bf16.cc). Each table is
// compiled in its own translation unit with its own flags (src/CMakeLists.txt), all from one
// template body (microkernels_impl.h), and picked at run time from Problem::isa — so one binary
// runs on any x86-64 and the library itself is built without -march=native.
// Conventions: row-major tiles with explicit leading dimensions (elements); "padded" widths are
// multiples of Microkernels::width (the vector length in floats; 1 for portable) and callers pad
// with zeros or −inf as each entry says. Scores live in base 2: the caller folds log2(e) into the
// softmax scale, so exp2 is the only transcendental here (natural-log bookkeeping stays in
// burst/softmax_merge.h).
// Does not: allocate, throw, thread, or know about masks and heads.
#pragma once

#include <cstdint>

#include "burst/isa.h"

namespace burst::kernels {

struct Microkernels {
  Isa isa = Isa::Portable;
  int width = 1;  ///< floats per vector register; padded extents are multiples of it

  /// C[M×N] (+)= A[M×K] · B[K×N]. A is read element-wise (row r at A + r·lda), B and C by rows.
  /// N must be a multiple of `width`; M, K ≥ 0 arbitrary. accumulate=false overwrites C.
  /// Register-blocked: rows × vectors (AVX-512 6×4 zmm, AVX2 3×4 ymm), A broadcast, B streamed.
  void (*gemm)(const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C, std::int64_t ldc,
               int M, int N, int K, bool accumulate) = nullptr;

  // ---- GEMM on B packed in column panels (AVX2 table only; panel = 0 and null elsewhere, where
  // callers use gemm). Panel p holds columns [p·panel, p·panel + w_p) of B, w_p = min(panel,
  // N − p·panel), as K_packed rows of w_p floats: Bp[p·ldp + k·w_p + c] = B[k][p·panel + c], with
  // ldp ≥ K_packed·panel (floats between panels). Results are bitwise those of gemm on B.
  int panel = 0;  ///< columns per panel, a multiple of width

  /// Packs B[K×N] (rows at B + k·ldb, N a multiple of width) into panels at Bp, panel stride ldp.
  void (*pack_panels)(const float* B, std::int64_t ldb, float* Bp, std::int64_t ldp, int K, int N) = nullptr;

  /// gemm with B packed by pack_panels (K ≤ the K_packed it was packed with: the first K rows
  /// of each panel). Register-blocked 6 rows × 2 ymm over contiguous panel rows.
  void (*gemm_packed)(const float* A, std::int64_t lda, const float* Bp, std::int64_t ldp, float* C,
                      std::int64_t ldc, int M, int N, int K, bool accumulate) = nullptr;

  /// max_j x[j] over n values (n a multiple of width); −inf for an all −inf row.
  float (*row_max)(const float* x, int n) = nullptr;

  /// x[j] ← exp2(x[j] − shift) for n values (n a multiple of width) and returns their sum, summed
  /// in vector lanes then lanes in a fixed order. shift must be finite and ≥ the x[j] (up to
  /// rounding: the running max); −inf entries become 0. Values of x[j] − shift below −126 give 0
  /// or a denormal below 2^−126 (0 under FlushDenormals). Accuracy as exp2.
  float (*exp2_shift_sum)(float* x, int n, float shift) = nullptr;

  /// x[j] ← a·x[j], n a multiple of width.
  void (*scale)(float* x, int n, float a) = nullptr;

  /// y[j] = exp2(x[j]) for any n: the same polynomial as every other entry (tests, odd sizes).
  /// Accuracy: max relative error ≈ 2.5e-7 for x ∈ [−126, 127]; x < −126 (incl. −inf) → 0.
  void (*exp2)(const float* x, float* y, std::int64_t n) = nullptr;

  /// Backward probabilities, transposed tile: st[r][c] ← exp2(c2·st[r][c] − shift[c]) for
  /// rows × cols (cols a multiple of width; row stride ld). shift[c] = lse of query c in base 2,
  /// +inf for queries that must contribute nothing (masked rows, padding) → exact 0. Arguments
  /// are ≤ 0 up to rounding (shift ≥ the row's scores); below −126 as exp2_shift_sum.
  void (*probs_t)(float* st, std::int64_t ld, int rows, int cols, float c2, const float* shift) = nullptr;

  /// Backward score gradient, transposed tile: pt[r][c] ← pt[r][c]·(dpt[r][c] − delta[c]).
  void (*dscores_t)(float* pt, const float* dpt, std::int64_t ld, int rows, int cols,
                    const float* delta) = nullptr;

  /// dst[c][r] = src[r][c] for rows × cols (any sizes), blocked for cache.
  void (*transpose)(const float* src, std::int64_t lds, float* dst, std::int64_t ldd, int rows,
                    int cols) = nullptr;

  /// Calibration for benchmarks on a shared machine: fma_probe_chains independent FMA chains of
  /// `width` lanes, iters steps (= iters·fma_probe_chains·2·width flop); returns a checksum so the
  /// work is not elided. Timing it next to a kernel gives the FMA peak available at that moment
  /// (docs/machine.md §2.1).
  float (*fma_probe)(std::int64_t iters) = nullptr;
  /// Chains of fma_probe: enough to cover FMA latency × pipes (4 cycles × 2 on Zen 3 and on
  /// AVX-512 cores) while every chain and both constants stay in registers — 16 of the 32 zmm
  /// (AVX-512), 12 of the 16 ymm (AVX2: 16 chains spill 3 of them to the stack and read ~53 of
  /// the ~99 GFLOP/s of a Zen 3 core), 16 for portable.
  int fma_probe_chains = 16;

  // ---- bf16 dot products (AVX512-BF16 table only; null elsewhere). Operands are bf16 bit
  // patterns (uint16_t). "Pair-packed" B: the reduction index k is split in pairs, pair row kk
  // holds, for each column n, the two values (B[2kk][n], B[2kk+1][n]) side by side at
  // Bp[kk·ldb + 2n + {0,1}] (ldb in bf16 elements, ≥ 2N) — the operand layout of vdpbf16ps.

  /// C[M×N] = alpha·A·B (accumulate=false) or C += alpha·A·B. A bf16 row-major [M][K] (row r at
  /// A + r·lda, lda even, K even: callers zero-pad an odd K), B pair-packed [K/2][N][2]. N a
  /// multiple of `width`. Products of bf16 are exact in fp32; sums are fp32 (vdpbf16ps adds the
  /// two products of a pair to the fp32 accumulator, flushing denormals).
  void (*gemm_bf16)(const std::uint16_t* A, std::int64_t lda, const std::uint16_t* Bp, std::int64_t ldb,
                    float* C, std::int64_t ldc, int M, int N, int K, bool accumulate, float alpha) = nullptr;

  /// dst[r][c] = bf16(src[r][c]) (round to nearest even) for rows × cols, and dst[r][cols] = 0
  /// when cols is odd (so the row is whole pairs). Row strides lds (floats), ldd (bf16 elements).
  void (*narrow_rows_bf16)(const float* src, std::int64_t lds, std::uint16_t* dst, std::int64_t ldd, int rows,
                           int cols) = nullptr;

  /// The bf16 forward's probabilities of one row of raw scores s (Q·Kᵀ unscaled, −inf where
  /// masked), in one pass that never stores them in fp32: e_j = exp2(c2·s[j] − shift) with the
  /// argument one FMA (one rounding), p[j] = bf16(e_j) (round to nearest even); returns Σ_j e_j
  /// of the fp32 values before rounding (FlashAttention-2's row sum), summed in fp32 in a fixed
  /// order. n a multiple of `width`. c2 > 0 and finite; shift finite and ≥ c2·s[j] up to
  /// rounding (the running max, base 2); −inf scores give exact zeros; arguments below −126 as
  /// exp2_shift_sum. Accuracy: e_j within 3.1e-6 relative of 2^x (kernels/exp2_p16.h: a
  /// degree-4 polynomial, exp2_p16 its scalar twin bit for bit; exp2's is degree 5), then bf16's
  /// rounding (2^−9).
  float (*probs_bf16)(const float* s, int n, float c2, float shift, std::uint16_t* p) = nullptr;

  /// Pair-packs fp32 rows src[k][n] (K rows, N a multiple of `width`, stride lds) as bf16:
  /// dst[kk·ldd + 2n + e] = bf16(src[2kk+e][n]), with row K taken as zeros when K is odd.
  void (*pack_pairs_bf16)(const float* src, std::int64_t lds, std::uint16_t* dst, std::int64_t ldd, int K,
                          int N) = nullptr;

  /// The bf16 twin of fma_probe: 16 independent vdpbf16ps chains, iters steps (= iters·16·4·width
  /// flop: each lane does two multiply-adds per step). Gives the bf16 dot-product ceiling.
  float (*bf16_dot_probe)(std::int64_t iters) = nullptr;
};

/// The table for `isa` (Auto is not allowed: the boundary resolves it). Tables are immutable.
/// Precondition: isa_available(isa) (AVX-512F+BW+BF16 for Avx512Bf16, AVX-512F for Avx512,
/// AVX2+FMA for Avx2, usable AMX for Amx, AVX2+FMA+F16C for AmxEmulated).
const Microkernels& microkernels(Isa isa);

// One per translation unit (microkernels_<isa>.cc).
const Microkernels& microkernels_avx512();
const Microkernels& microkernels_avx512bf16();  ///< the AVX-512 table + the bf16 entries
const Microkernels& microkernels_avx2();
const Microkernels& microkernels_portable();
/// The AVX512-BF16 table with gemm_bf16 on AMX tiles (tdpbf16ps) and bf16_dot_probe the AMX
/// ceiling (microkernels_amx.cc). Precondition: isa_available(Isa::Amx).
const Microkernels& microkernels_amx();
/// The same GEMM over a software model of the tile instructions, on the best fp32 table here
/// (microkernels_amx_emulated.cc; no bf16_dot_probe). Precondition: AVX2+FMA+F16C.
const Microkernels& microkernels_amx_emulated();

/// Sets FTZ/DAZ in MXCSR for the current thread and restores the caller's value on destruction:
/// denormal operands in the rescale FMAs trigger microcode assists (docs/machine.md §4). Changes only
/// results below 1.2e-38 in magnitude. No-op off x86.
class FlushDenormals {
 public:
  FlushDenormals();
  ~FlushDenormals();
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned saved_ = 0;
};

}  // namespace burst::kernels
