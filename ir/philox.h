// The definition of loom's random numbers: Philox-4x32-10 (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11) keyed by the seed,
// with counter = offset + element index. Every backend produces exactly
// these values, so results depend on neither thread count nor backend.
//
// One text serves host C++ and CUDA: kernels/cuda embeds this file into the
// source NVRTC compiles, which has no standard headers, so under NVRTC the
// fixed-width types are declared here and the math is CUDA's own.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define LOOM_HOST_DEVICE __host__ __device__
#else
#define LOOM_HOST_DEVICE
#endif

#ifndef __CUDACC_RTC__
#include <cmath>
#include <cstdint>
#endif

namespace loom::ir::philox {

#ifdef __CUDACC_RTC__
using uint32_t = unsigned int;
using uint64_t = unsigned long long;
using ::sqrt;
#else
using std::sqrt;
#endif

// Products and sums that are never fused into an FMA (nvcc fuses a*b + c by
// default; GCC in ISO C++ mode does not): with them, and IEEE division and
// sqrt, the host and a GPU compute the same bits.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define LOOM_DMUL(a, b) __dmul_rn(a, b)
#define LOOM_DADD(a, b) __dadd_rn(a, b)
#else
#define LOOM_DMUL(a, b) ((a) * (b))
#define LOOM_DADD(a, b) ((a) + (b))
#endif

// log(x) for x in (0, 1], about 1 ulp: x = m * 2^e with m in [1/sqrt2,
// sqrt2), log m = 2 atanh(s) with s = (m - 1) / (m + 1), |s| < 0.172.
// libm's log is not used because CUDA's and glibc's differ in the last bit.
LOOM_HOST_DEVICE inline double log_unit(double x) {
  int e = 0;
  while (x < 0x1.0p-16) {
    x = x * 0x1.0p16;  // exact
    e -= 16;
  }
  while (x < 0.70710678118654752) {
    x = x * 2.0;
    --e;
  }
  const double s = (x - 1.0) / (x + 1.0);
  const double s2 = LOOM_DMUL(s, s);
  double poly = 1.0 / 25.0;
  for (int k = 11; k >= 0; --k) poly = LOOM_DADD(LOOM_DMUL(poly, s2), 1.0 / (2 * k + 1));
  const double ln2_hi = 0x1.62e42fefa3800p-1, ln2_lo = 0x1.ef35793c76730p-45;  // ln2_hi * e is exact for |e| < 2^10
  return LOOM_DADD(LOOM_DMUL(e, ln2_hi), LOOM_DADD(LOOM_DMUL(e, ln2_lo), LOOM_DMUL(2.0 * s, poly)));
}

// cos(2 pi u) for u in [0, 1), about 1 ulp: the quadrant comes from 4u
// exactly, the rest is a Taylor series on [-pi/4, pi/4].
LOOM_HOST_DEVICE inline double cos_turns(double u) {
  const double t = 4.0 * u;  // exact
  const long long q = static_cast<long long>(t + 0.5);
  const double r = LOOM_DMUL(t - static_cast<double>(q), 1.5707963267948966);  // t - q is exact
  const double r2 = LOOM_DMUL(r, r);
  // Horner in r^2 from the r^18 (cos) and r^19 (sin) terms down; the
  // factorials are exact doubles, so 1/n! rounds the same everywhere.
  const double cos_k[9] = {1.0 / 20922789888000.0, 1.0 / 87178291200.0, 1.0 / 479001600.0, 1.0 / 3628800.0, 1.0 / 40320.0,
                           1.0 / 720.0,            1.0 / 24.0,          1.0 / 2.0,         1.0};  // 1/16! ... 1/0!
  const double sin_k[9] = {1.0 / 355687428096000.0, 1.0 / 1307674368000.0, 1.0 / 6227020800.0, 1.0 / 39916800.0,
                           1.0 / 362880.0,          1.0 / 5040.0,          1.0 / 120.0,        1.0 / 6.0,
                           1.0};  // 1/17! ... 1/1!
  double c = -1.0 / 6402373705728000.0, sn = -1.0 / 121645100408832000.0;  // -1/18!, -1/19!
  for (int k = 0; k < 9; ++k) {
    const double sign = k % 2 == 0 ? 1.0 : -1.0;
    c = LOOM_DADD(LOOM_DMUL(c, r2), sign * cos_k[k]);
    sn = LOOM_DADD(LOOM_DMUL(sn, r2), sign * sin_k[k]);
  }
  sn = LOOM_DMUL(sn, r);
  switch (q & 3) {
    case 0: return c;
    case 1: return -sn;
    case 2: return -c;
    default: return sn;
  }
}

struct U32x4 {
  uint32_t v[4];
};

LOOM_HOST_DEVICE inline U32x4 philox4x32_10(uint64_t counter, uint64_t seed) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = static_cast<uint32_t>(p1);
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 53 random bits (cast to float32 rounds; values that
// round to 1.0f are mapped to the largest float below 1).
LOOM_HOST_DEVICE inline double uniform(uint64_t seed, uint64_t offset, uint64_t index) {
  U32x4 r = philox4x32_10(offset + index, seed);
  uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 21) ^ (static_cast<uint64_t>(r.v[1]) >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * 0x1.0p-53;
}

// Standard normal by Box-Muller over two 32-bit uniforms in (0, 1), with
// log and cos of loom's own so every backend gets the same bits.
LOOM_HOST_DEVICE inline double normal(uint64_t seed, uint64_t offset, uint64_t index) {
  U32x4 r = philox4x32_10(offset + index, seed);
  double u1 = (static_cast<double>(r.v[2]) + 0.5) * 0x1.0p-32;
  double u2 = (static_cast<double>(r.v[3]) + 0.5) * 0x1.0p-32;
  return LOOM_DMUL(sqrt(-2.0 * log_unit(u1)), cos_turns(u2));
}

LOOM_HOST_DEVICE inline float uniform_f32(double u) {
  float f = static_cast<float>(u);
  return f < 1.0f ? f : 0x1.fffffep-1f;
}

}  // namespace loom::ir::philox
