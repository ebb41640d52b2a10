// Half: IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits), stored as
// its bits, as PyTorch's c10::Half. It converts to float exactly and from
// float with round-to-nearest-even, subnormals kept, a magnitude of 65520
// or more rounding to inf and a NaN staying a quiet NaN of the same sign:
// the bits of the CPUs' vcvtps2ph and the GPUs' cvt.rn.f16.f32. Arithmetic
// on it goes through float, so `a + b` is computed in float32 and rounded
// once when assigned back to a Half: what every loom backend does per op.
// The conversions are integer bit manipulation, so they do not depend on
// the floating-point environment (flush-to-zero leaves them exact).
#pragma once
#include <cstdint>
#include <ostream>

#pragma GCC visibility push(default)
namespace loom {

struct Half {
  uint16_t x = 0;  // the bits

  Half() = default;
  Half(float f) : x(round_bits(f)) {}  // NOLINT: implicit, as c10::Half
  operator float() const { return to_float(x); }  // NOLINT

  static Half from_bits(uint16_t bits) {
    Half h;
    h.x = bits;
    return h;
  }
  static constexpr float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return __builtin_bit_cast(float, sign | 0x7f800000u | (m << 13));
    if (e != 0) return __builtin_bit_cast(float, sign | ((e + 112u) << 23) | (m << 13));
    // A subnormal is m units of 2^-24: exact in float.
    const float v = static_cast<float>(m) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  // Round to nearest, ties to even, on the float's bits.
  static constexpr uint16_t round_bits(float f) {
    const uint32_t u = __builtin_bit_cast(uint32_t, f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((a >> 13) & 0x3ffu);  // NaN, quieted
    if (a >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up (and inf): inf
    if (a >= 0x38800000u) {  // a normal half: rebias the exponent, round away 13 bits
      const uint32_t r = a - 0x38000000u;
      return sign | static_cast<uint16_t>((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
    }
    // A subnormal half (or zero): the mantissa with its implicit bit, in
    // units of 2^-24, rounded; a carry reaches the smallest normal exactly.
    const uint32_t e = a >> 23;
    if (e < 101) return sign;  // below 2^-26: less than half the smallest subnormal
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
    return sign | static_cast<uint16_t>((mant + ((1u << (shift - 1)) - 1) + ((mant >> shift) & 1u)) >> shift);
  }
};

inline std::ostream& operator<<(std::ostream& os, Half h) { return os << static_cast<float>(h); }

}  // namespace loom
#pragma GCC visibility pop
