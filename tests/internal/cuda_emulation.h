// Just enough of CUDA to run kernels/cuda/library_kernels.cu on the host:
// the test includes that file after this one and launches its kernels
// here, so their results can be compared with kernels/cpu without a GPU.
//
// Blocks run one after another. The threads of a block run one after
// another too, except for kernels that use __syncthreads (matmul, argsort): those
// get one std::thread per CUDA thread and a std::barrier, and __shared__
// becomes `static` (shared by the threads of the one block running).
// Atomics are std::atomic_ref; the _rn arithmetic is plain host arithmetic
// (loom builds in ISO mode, where GCC does not contract to fma).
// It checks results, not timing or races: a race that happens to give the
// right answer sequentially passes here.
#pragma once
#include <atomic>
#include <barrier>
#include <bit>
#include <cstdint>
#include <thread>
#include <vector>

struct EmulatedDim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local EmulatedDim3 threadIdx, blockIdx, blockDim, gridDim;
inline thread_local std::barrier<>* emulated_block_barrier = nullptr;

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline

inline void __syncthreads() { emulated_block_barrier->arrive_and_wait(); }

inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long expected, unsigned long long desired) {
  std::atomic_ref<unsigned long long>(*p).compare_exchange_strong(expected, desired);
  return expected;  // the old value, as CUDA's
}
inline unsigned int atomicCAS(unsigned int* p, unsigned int expected, unsigned int desired) {
  std::atomic_ref<unsigned int>(*p).compare_exchange_strong(expected, desired);
  return expected;
}
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline double atomicAdd(double* p, double v) { return std::atomic_ref<double>(*p).fetch_add(v); }
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) { return std::atomic_ref<unsigned int>(*p).fetch_add(v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*p).fetch_add(v);
}
inline unsigned int atomicOr(unsigned int* p, unsigned int v) { return std::atomic_ref<unsigned int>(*p).fetch_or(v); }

inline float __uint_as_float(unsigned int u) { return std::bit_cast<float>(u); }
inline unsigned int __float_as_uint(float f) { return std::bit_cast<unsigned int>(f); }
inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }

using EmulatedKernel = void (*)(void* const*, const double*, const long long*, long long*, const long long*);

// Runs `kernel` over grid x block. `uses_barrier`: the kernel calls
// __syncthreads, so each block's threads must run at the same time.
inline void emulate_launch(EmulatedKernel kernel, const unsigned grid[3], const unsigned block[3], bool uses_barrier,
                           void* const* bufs, const double* fs, const long long* is, long long* err,
                           const long long* meta) {
  const EmulatedDim3 g{grid[0], grid[1], grid[2]}, b{block[0], block[1], block[2]};
  const unsigned threads = b.x * b.y * b.z;
  auto thread_at = [&](EmulatedDim3 block_idx, unsigned t, std::barrier<>* barrier) {
    gridDim = g;
    blockDim = b;
    blockIdx = block_idx;
    threadIdx = {t % b.x, t / b.x % b.y, t / (b.x * b.y)};
    emulated_block_barrier = barrier;
    kernel(bufs, fs, is, err, meta);
  };
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned x = 0; x < g.x; ++x) {
        if (!uses_barrier) {
          for (unsigned t = 0; t < threads; ++t) thread_at({x, y, z}, t, nullptr);
          continue;
        }
        std::barrier<> barrier(threads);
        std::vector<std::jthread> pool;
        for (unsigned t = 0; t < threads; ++t) pool.emplace_back(thread_at, EmulatedDim3{x, y, z}, t, &barrier);
      }
}
