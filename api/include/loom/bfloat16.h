// BFloat16: the 16-bit brain float (1 sign, 8 exponent, 7 mantissa bits),
// stored as its bits. It converts to float exactly and from float with
// round-to-nearest-even, as PyTorch's c10::BFloat16 and the GPUs'
// cvt.rn.bf16.f32 do. Arithmetic on it goes through float, so `a + b` is
// computed in float32 and rounded once when assigned back to a BFloat16:
// what every loom backend does per op.
#pragma once
#include <cstdint>
#include <ostream>

#pragma GCC visibility push(default)
namespace loom {

struct BFloat16 {
  uint16_t x = 0;  // the bits

  BFloat16() = default;
  BFloat16(float f) : x(round_bits(f)) {}  // NOLINT: implicit, as c10::BFloat16
  operator float() const { return to_float(x); }  // NOLINT

  static BFloat16 from_bits(uint16_t bits) {
    BFloat16 b;
    b.x = bits;
    return b;
  }
  static constexpr float to_float(uint16_t bits) {
    return __builtin_bit_cast(float, static_cast<uint32_t>(bits) << 16);
  }
  // Round to nearest, ties to even; a NaN stays a (quiet) NaN of the same
  // sign, an overflow rounds to inf as IEEE rounding does.
  static constexpr uint16_t round_bits(float f) {
    const uint32_t u = __builtin_bit_cast(uint32_t, f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
};

inline std::ostream& operator<<(std::ostream& os, BFloat16 b) { return os << static_cast<float>(b); }

}  // namespace loom
#pragma GCC visibility pop
