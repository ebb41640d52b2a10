// bfloat16 on the GPU, for every CUDA source loom compiles: the generated
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
