// What a small replayed step costs on a GPU machine before any of loom's
// work (docs/PERFORMANCE.md, "Floors"): a captured CUDA graph of 1, 2 or 3
// kernels, launched and waited for (cudaGraphLaunch + cudaStreamSynchronize,
// p50 of 3000), once with empty kernels and once with a hand-written W5
// step in one block (two 64x64 products with tanh, ten clamped updates).
// It is the floor under loom's single-block programs (jit/cuda/codegen.h).
// Build: nvcc -O3 -arch=sm_90 -o small_step_floor small_step_floor.cu
// Run:   ./small_step_floor [spin]   (spin: cudaDeviceScheduleSpin)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

__global__ void empty_step(float* p) {
  if (threadIdx.x == 0) p[blockIdx.x] += 1.0f;
}

// One thread per element of the 64-wide state; s and h staged in shared memory.
__global__ void w5_step(const float* s0, const float* w1, const float* w2, float* out) {
  __shared__ float s[64], h[64];
  const int j = threadIdx.x;
  s[j] = s0[j];
  __syncthreads();
  float acc = 0;
  for (int k = 0; k < 64; ++k) acc += s[k] * w1[k * 64 + j];
  h[j] = tanhf(acc);
  __syncthreads();
  acc = 0;
  for (int k = 0; k < 64; ++k) acc += h[k] * w2[k * 64 + j];
  const float a = tanhf(acc);
  float v = s[j];
  for (int i = 0; i < 10; ++i) v = fminf(fmaxf(v * 0.99f + a * 0.01f, -1.f), 1.f);
  out[j] = v;
}

int main(int argc, char** argv) {
  if (argc > 1) cudaSetDeviceFlags(cudaDeviceScheduleSpin);
  float* p;
  cudaMalloc(&p, 1 << 20);
  cudaMemset(p, 0, 1 << 20);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  for (int kernels : {1, 2, 3})
    for (int w5 = 0; w5 < 2; ++w5) {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
      for (int i = 0; i < kernels; ++i) {
        if (w5) w5_step<<<1, 64, 0, st>>>(p, p + 64, p + 64 + 4096, p + 10000);
        else empty_step<<<1, 64, 0, st>>>(p);
      }
      cudaStreamEndCapture(st, &g);
      cudaGraphInstantiate(&ge, g, 0);
      std::vector<double> us;
      for (int i = 0; i < 3000; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        cudaGraphLaunch(ge, st);
        cudaStreamSynchronize(st);
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(us.begin(), us.end());
      std::printf("%s: graph of %d %s kernels, launch + wait p50 %.2f us, p10 %.2f us\n", argc > 1 ? "spin" : "auto",
                  kernels, w5 ? "W5-step" : "empty", us[us.size() / 2], us[us.size() / 10]);
    }
  std::printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
