// The definition of loom's random numbers: Philox-4x32-10 (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11) keyed by the seed,
// with counter = offset + element index. Every backend produces exactly
// these values, so results depend on neither thread count nor backend.
#pragma once
#include <cmath>
#include <cstdint>

namespace loom::ir::philox {

struct U32x4 {
  uint32_t v[4];
};

inline U32x4 philox4x32_10(uint64_t counter, uint64_t seed) {
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
inline double uniform(uint64_t seed, uint64_t offset, uint64_t index) {
  U32x4 r = philox4x32_10(offset + index, seed);
  uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 21) ^ (static_cast<uint64_t>(r.v[1]) >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * 0x1.0p-53;
}

// Standard normal by Box-Muller over two 32-bit uniforms in (0, 1).
inline double normal(uint64_t seed, uint64_t offset, uint64_t index) {
  U32x4 r = philox4x32_10(offset + index, seed);
  double u1 = (static_cast<double>(r.v[2]) + 0.5) * 0x1.0p-32;
  double u2 = (static_cast<double>(r.v[3]) + 0.5) * 0x1.0p-32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

inline float uniform_f32(double u) {
  float f = static_cast<float>(u);
  return f < 1.0f ? f : 0x1.fffffep-1f;
}

}  // namespace loom::ir::philox
