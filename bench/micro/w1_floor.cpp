// The least time W1 (`y = sigmoid(tanh(x*1.5 + 0.5) * x) + x*x`, 2^24 f32)
// can take on this CPU, from what its FMA pipes can do
// (docs/PERFORMANCE.md, "Floors"). W1's bar compares it with W0, a copy:
// this program says whether the arithmetic alone already takes longer than
// 70% of W0 allows, whatever code computes it.
//
// The count, per 16 float32 lanes (one AVX-512 register), of work on the
// FMA pipes of the cheapest W1 accurate to a few ulp that we know how to
// write (loom's own takes 25 slots and a vpternlogd):
//   - W1's own multiplies: x*1.5, tanh(..)*x, x*x                     3
//   - tanh and sigmoid each need e^r on |r| <= ln2/2 to float accuracy:
//     n = round(v log2e) and r = v - n ln2 (2 FMAs, ln2 as one constant),
//     then a polynomial of degree >= 5 (5 FMAs: a degree-5 fit is 0.8 ulp
//     off, degree 4 already 24 ulp)                                   2 x 7
//   - each divides once (tanh = m/(m+2), sigmoid = 1/(1+t)); a division
//     runs on the divider but holds the FMA pipes for some cycles: measured
//     below (a reciprocal estimate and a Newton step cost 3 slots)       2 x D
// The adds, compares, min/max, logic and vscalefps of the same code issue
// beside the FMAs (also measured below), so they are left out: a floor.
//
// Build: g++ -O2 -march=native -o w1_floor bench/micro/w1_floor.cpp
// Run:   ./w1_floor [cores]   (default 2), then compare with loom-bench's
//        W0 and W1 rows taken in the same minute.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// The lanes' sum, through memory: GCC 12's _mm512_reduce_add_ps trips its
// own -Wuninitialized.
float lane_sum(__m512 v) {
  alignas(64) float f[16];
  _mm512_store_ps(f, v);
  float s = 0;
  for (float x : f) s += x;
  return s;
}

// Twelve independent chains, so latency never limits: F FMAs, D divisions
// and A adds an iteration (template arguments, so the loops unroll; no call
// inside, so the chains stay in registers). Returns a sum so nothing is dead.
template <int F, int D, int A>
__attribute__((noinline)) float run_mix(long iters) {
  __m512 v[12], q[4], w[4];
  for (int i = 0; i < 12; ++i) v[i] = _mm512_set1_ps(1.0f + i * 0.01f);
  for (int i = 0; i < 4; ++i) q[i] = _mm512_set1_ps(1.5f + i), w[i] = _mm512_set1_ps(2.0f + i);
  const __m512 c = _mm512_set1_ps(0.9999f), d = _mm512_set1_ps(1e-7f), one = _mm512_set1_ps(1.0f);
  for (long k = 0; k < iters; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < F; ++i) v[i % 12] = _mm512_fmadd_ps(v[i % 12], c, d);
#pragma GCC unroll 4
    for (int i = 0; i < D; ++i) q[i] = _mm512_div_ps(one, q[i]);
#pragma GCC unroll 4
    for (int i = 0; i < A; ++i) w[i] = _mm512_add_ps(w[i], d);
  }
  float sum = 0;
  for (const __m512& x : v) sum += lane_sum(x);
  for (int i = 0; i < 4; ++i) sum += lane_sum(q[i]) + lane_sum(w[i]);
  return sum;
}

// Nanoseconds an iteration of run_mix, the median of 9 runs. Cycles are not
// readable in this VM (no perf counters).
template <int F, int D, int A>
double mix() {
  constexpr long kIters = 2000000;
  std::vector<double> t;
  float sink = 0;
  for (int r = 0; r < 9; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    sink += run_mix<F, D, A>(kIters);
    t.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kIters);
  }
  if (sink == 1.2345f) std::puts("");
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int cores = argc > 1 ? std::atoi(argv[1]) : 2;
  const double fma12 = mix<12, 0, 0>();
  const double slot = fma12 / 12;  // ns of one FMA-pipe slot (one zmm FMA)
  const double div_slots = (mix<12, 2, 0>() - fma12) / slot / 2;
  const double add_slots = (mix<12, 0, 4>() - fma12) / slot / 4;
  const double slots = 3 + 2 * 7 + 2 * div_slots;  // per 16 lanes, see the top
  const double n = 1 << 24;
  const double floor_ms = n / 16 * slots * slot / cores / 1e6;
  const double gbs = 2.0 * 4 * n / (floor_ms / 1e3) / 1e9;
  std::printf("FMA slot %.3f ns (%.2f GHz at one zmm FMA a cycle)\n", slot, 1 / slot);
  std::printf("a division beside FMAs holds %.2f slots; an add beside them %.2f\n", div_slots, add_slots);
  std::printf("W1 floor: %.1f slots per 16 lanes -> %.2f ms on %d cores = %.1f GB/s; "
              "70%% of a W0 above %.1f GB/s is out of reach\n",
              slots, floor_ms, cores, gbs, gbs / 0.7);
  return 0;
}
