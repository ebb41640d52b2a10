// What the bfloat16 micro programs (bf16_gemm.cu, flash_attention.cu) share
// on the host: CHECK for CUDA runtime calls, and host bfloat16 conversions
// written differently from the device helpers of kernels/cuda/bfloat16.cuh
// (choose between the two neighbours by the dropped half), so that one
// checks the other.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(x)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

static inline float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return uint16_t((u >> 16) | 0x40);
  const uint32_t down = u >> 16, rest = u & 0xffff;
  const bool up = rest > 0x8000 || (rest == 0x8000 && (down & 1));
  return uint16_t(down + (up ? 1 : 0));  // a carry into the exponent is the right rounding (up to infinity)
}
