// Kept with the data it produced (amx_rounding.txt); not built by CMake.
// g++ -O2 -std=c++17 -mamx-tile -mamx-bf16 -mavx512f amx_rounding_probe.cc -o amx_rounding_probe
// Which model of TDPBF16PS's rounding does the hardware follow? Random bf16 tiles, M=1..16 rows,
// N=16, Kp pairs; count bit-exact matches of each candidate model per Kp.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
struct Cfg {
  uint8_t palette, start;
  uint8_t r0[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static float bf(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static float ftz(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0) {
    u &= 0x80000000u;
    memcpy(&x, &u, 4);
  }
  return x;
}
static uint16_t tobf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
static float rodd(long double x) {  // round to fp32 with round-to-odd
  float t = (float)x;               // RNE
  if ((long double)t == x) return t;
  float lo = t, hi = t;
  if ((long double)t > x)
    lo = std::nextafter(t, -INFINITY);
  else
    hi = std::nextafter(t, INFINITY);
  uint32_t u;
  memcpy(&u, &lo, 4);
  return (u & 1) ? lo : hi;
}
int main() {
  if (syscall(SYS_arch_prctl, 0x1023, 18)) {
    puts("no AMX permission");
    return 1;
  }
  std::mt19937 rng(7);
  const int NM = 9;
  const char* names[NM] = {
      "seq_even_odd_rne(emulator)",   "seq_odd_even_rne",          "pair_exact_then_add_rne",
      "pair_rne_then_add_rne",        "acc+pair_exact_once",       "whole_dot_exact_once",
      "pair_exact_rodd_then_add_rne", "acc_exact_dot_ftz_chunks4", "whole_dot_fp32_tree"};
  for (int Kp : {1, 2, 4, 8, 16}) {
    int match[NM] = {0};
    int total = 0;
    for (int trial = 0; trial < 200; ++trial) {
      int M = 4, N = 16;
      std::uniform_real_distribution<float> d(-3.f, 3.f);
      std::vector<uint16_t> A(M * 2 * Kp), B(Kp * 2 * N);
      std::vector<float> C(M * N), C0(M * N);
      for (auto& x : A) x = tobf(d(rng) * std::ldexp(1.f, (int)(rng() % 9) - 4));
      for (auto& x : B) x = tobf(d(rng) * std::ldexp(1.f, (int)(rng() % 9) - 4));
      for (auto& x : C0) x = d(rng) * (trial % 2 ? 1.f : 0.f);
      C = C0;
      Cfg cfg{};
      cfg.palette = 1;
      cfg.rows[0] = M;
      cfg.colsb[0] = N * 4;
      cfg.rows[1] = M;
      cfg.colsb[1] = Kp * 4;
      cfg.rows[2] = Kp;
      cfg.colsb[2] = N * 4;
      _tile_loadconfig(&cfg);
      _tile_loadd(0, C.data(), N * 4);
      _tile_loadd(1, A.data(), Kp * 4);
      _tile_loadd(2, B.data(), N * 4);
      _tile_dpbf16ps(0, 1, 2);
      _tile_stored(0, C.data(), N * 4);
      _tile_release();
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          float hw = C[m * N + n];
          ++total;
          float r[NM];
          auto a = [&](int k, int j) { return bf(A[m * 2 * Kp + 2 * k + j]); };
          auto b = [&](int k, int j) { return bf(B[k * 2 * N + 2 * n + j]); };
          float acc;
          acc = C0[m * N + n];
          for (int k = 0; k < Kp; ++k) {
            acc = ftz(acc + a(k, 0) * b(k, 0));
            acc = ftz(acc + a(k, 1) * b(k, 1));
          }
          r[0] = acc;
          acc = C0[m * N + n];
          for (int k = 0; k < Kp; ++k) {
            acc = ftz(acc + a(k, 1) * b(k, 1));
            acc = ftz(acc + a(k, 0) * b(k, 0));
          }
          r[1] = acc;
          acc = C0[m * N + n];
          for (int k = 0; k < Kp; ++k) {
            float p = (float)((long double)a(k, 0) * b(k, 0) + (long double)a(k, 1) * b(k, 1));
            acc = ftz(acc + p);
          }
          r[2] = acc;
          acc = C0[m * N + n];
          for (int k = 0; k < Kp; ++k) {
            float p = ftz(a(k, 0) * b(k, 0) + a(k, 1) * b(k, 1));
            acc = ftz(acc + p);
          }
          r[3] = acc;
          acc = C0[m * N + n];
          for (int k = 0; k < Kp; ++k) {
            acc = ftz(
                (float)((long double)acc + (long double)a(k, 0) * b(k, 0) + (long double)a(k, 1) * b(k, 1)));
          }
          r[4] = acc;
          {
            long double s = C0[m * N + n];
            for (int k = 0; k < Kp; ++k) s += (long double)a(k, 0) * b(k, 0) + (long double)a(k, 1) * b(k, 1);
            r[5] = ftz((float)s);
          }
          acc = C0[m * N + n];
          for (int k = 0; k < Kp; ++k) {
            float p = rodd((long double)a(k, 0) * b(k, 0) + (long double)a(k, 1) * b(k, 1));
            acc = ftz(acc + p);
          }
          r[6] = acc;
          {
            long double s = C0[m * N + n];
            float f = C0[m * N + n];
            for (int k = 0; k < Kp; ++k) {
              s += (long double)a(k, 0) * b(k, 0) + (long double)a(k, 1) * b(k, 1);
              if (k % 4 == 3 || k == Kp - 1) {
                f = (float)s;
                s = f;
              }
            }
            r[7] = ftz(f);
          }
          {
            std::vector<float> p;
            for (int k = 0; k < Kp; ++k) {
              p.push_back(a(k, 0) * b(k, 0));
              p.push_back(a(k, 1) * b(k, 1));
            }
            while (p.size() > 1) {
              std::vector<float> q;
              for (size_t i = 0; i + 1 < p.size(); i += 2) q.push_back(p[i] + p[i + 1]);
              if (p.size() % 2) q.push_back(p.back());
              p = q;
            }
            r[8] = ftz(C0[m * N + n] + p[0]);
          }
          for (int i = 0; i < NM; ++i)
            if (memcmp(&r[i], &hw, 4) == 0) ++match[i];
        }
    }
    printf("Kp=%2d total=%d", Kp, total);
    for (int i = 0; i < NM; ++i) printf(" | %s %d", names[i], match[i]);
    printf("\n");
  }
  return 0;
}
