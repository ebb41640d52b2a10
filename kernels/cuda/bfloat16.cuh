// bfloat16 and float16 on the GPU, for every CUDA source loom compiles: the generated
// kernels (after jit/cuda/prelude.cu.inc), the GEMM template and the
// library kernels. The build embeds this text before each of them
// (embed_source.cmake), so NVRTC needs no cuda_bf16.h and there is one
// definition of the rounding.
//
// A bfloat16 travels as its 16 bits (unsigned short) and is computed in
// float32. Widening is exact. Narrowing rounds to nearest even on the 16
// dropped bits; a NaN is not rounded (a carry could turn its payload into
// infinity): it keeps its sign and upper payload with the quiet bit set.
// These are the bits loom::BFloat16 (api/include/loom/bfloat16.h) and the
// LLVM generator give.
#pragma once

__device__ __forceinline__ float loom_bf16_widen(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
__device__ __forceinline__ unsigned loom_bf16_bits(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u & 0xffff0000u) | 0x00400000u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}
// f rounded to bfloat16, still as a float.
__device__ __forceinline__ float loom_bf16_round(float f) { return __uint_as_float(loom_bf16_bits(f)); }
__device__ __forceinline__ unsigned short loom_bf16_narrow(float f) { return (unsigned short)(loom_bf16_bits(f) >> 16); }

// float16 travels the same way, as its 16 bits, computed in float32, with
// loom::Half's conversions (api/include/loom/half.h) written out here:
// round to nearest even with subnormals, 65520 and up to inf, a NaN quieted
// with its sign and upper payload. Integer operations, not cvt.rn.f16.f32
// or cuda_fp16.h: the same bits as the CPU for every input (NaNs included),
// no header for NVRTC, and this file still compiles as host C++ for the
// library's emulated tests.
__device__ __forceinline__ float loom_f16_widen(unsigned short h) {
  const unsigned sign = (unsigned)(h & 0x8000u) << 16, e = h & 0x7c00u, t = (unsigned)(h & 0x7fffu) << 13;
  if (e == 0x7c00u) return __uint_as_float(sign | (t + 0x70000000u));
  if (e != 0) return __uint_as_float(sign | (t + 0x38000000u));
  return __uint_as_float(sign | __float_as_uint((float)(h & 0x3ffu) * 5.9604644775390625e-08f));
}
__device__ __forceinline__ unsigned short loom_f16_narrow(float f) {
  const unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (a >= 0x38800000u) {
    const unsigned r = a - 0x38000000u;
    return (unsigned short)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  const unsigned e = a >> 23;
  if (e < 101) return (unsigned short)sign;
  const unsigned mant = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
  return (unsigned short)(sign | ((mant + ((1u << (shift - 1)) - 1) + ((mant >> shift) & 1u)) >> shift));
}
// f rounded to float16, still as a float.
__device__ __forceinline__ float loom_f16_round(float f) { return loom_f16_widen(loom_f16_narrow(f)); }
