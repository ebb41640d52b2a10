// Launch-path microbenchmark (docs/PERFORMANCE.md, "Floors"): what a kernel launch + wait costs on a GPU, by variant. Build: nvcc -O3 -arch=sm_90 -cudart static -o launch_floor launch_floor.cu; run: ./launch_floor [spin|yield|block]
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
using Clock = std::chrono::steady_clock;
struct Big { long long w[128]; };
__global__ void empty(long long* p) { if (p && threadIdx.x == 999) p[0] = 1; }
__global__ void empty_ind(const long long* args) { long long* p = (long long*)args[0]; if (threadIdx.x == 999) p[0] = 1; }
__global__ void byval(const __grid_constant__ Big a) { long long* p = (long long*)a.w[0]; if (threadIdx.x == 999) p[0] = 1; }
__device__ __forceinline__ float sig(float v) { return 1.f / (1.f + __expf(-v)); }
__global__ void w1(const long long* args, long long n4) {
  const float4* x = (const float4*)args[0]; float4* y = (float4*)args[1];
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n4) { float4 v = x[i]; float4 r;
    r.x = sig(tanhf(v.x*1.5f+.5f)*v.x)+v.x*v.x; r.y = sig(tanhf(v.y*1.5f+.5f)*v.y)+v.y*v.y;
    r.z = sig(tanhf(v.z*1.5f+.5f)*v.z)+v.z*v.z; r.w = sig(tanhf(v.w*1.5f+.5f)*v.w)+v.w*v.w; y[i] = r; }
}
__global__ void w1v(const __grid_constant__ Big a, long long n4) {
  const float4* x = (const float4*)a.w[0]; float4* y = (float4*)a.w[1];
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n4) { float4 v = x[i]; float4 r;
    r.x = sig(tanhf(v.x*1.5f+.5f)*v.x)+v.x*v.x; r.y = sig(tanhf(v.y*1.5f+.5f)*v.y)+v.y*v.y;
    r.z = sig(tanhf(v.z*1.5f+.5f)*v.z)+v.z*v.z; r.w = sig(tanhf(v.w*1.5f+.5f)*v.w)+v.w*v.w; y[i] = r; }
}
__global__ void copy4(const float4* x, float4* y, long long n4) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; if (i < n4) y[i] = x[i];
}
double med(std::function<void()> f, int n = 2000) {
  for (int i = 0; i < 50; ++i) f();
  std::vector<double> t; t.reserve(n);
  for (int i = 0; i < n; ++i) { auto a = Clock::now(); f(); t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count()); }
  std::sort(t.begin(), t.end()); return t[n / 2];
}
int main(int argc, char** argv) {
  bool spin = argc > 1 && !strcmp(argv[1], "spin");
  bool yield = argc > 1 && !strcmp(argv[1], "yield");
  bool block = argc > 1 && !strcmp(argv[1], "block");
  if (spin) cudaSetDeviceFlags(cudaDeviceScheduleSpin);
  if (yield) cudaSetDeviceFlags(cudaDeviceScheduleYield);
  if (block) cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync);
  cudaStream_t s; cudaFree(0); cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  long long *dargs, *hargs; cudaMalloc(&dargs, 1024); cudaMallocHost(&hargs, 1024);
  const long long N = 1ll << 24, n4 = N / 4;
  float *x, *y; cudaMalloc(&x, N * 4); cudaMalloc(&y, N * 4);
  cudaMemset(x, 0, N * 4);
  hargs[0] = (long long)x; hargs[1] = (long long)y; cudaMemcpy(dargs, hargs, 16, cudaMemcpyHostToDevice);
  cudaEvent_t ev; cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  Big b{}; b.w[0] = (long long)x; b.w[1] = (long long)y;
  const char* mode = argc > 1 ? argv[1] : "auto";
  auto row = [&](const char* n, double us) { printf("%-6s %-44s %8.2f us\n", mode, n, us); };
  row("empty launch + streamSync", med([&] { empty<<<1, 32, 0, s>>>(nullptr); cudaStreamSynchronize(s); }));
  row("empty launch + spin streamQuery", med([&] { empty<<<1, 32, 0, s>>>(nullptr); while (cudaStreamQuery(s) == cudaErrorNotReady) {} }));
  row("H2D 128B + eventRecord + launch + sync", med([&] { cudaMemcpyAsync(dargs, hargs, 128, cudaMemcpyHostToDevice, s); cudaEventRecord(ev, s); empty_ind<<<1, 32, 0, s>>>(dargs); cudaStreamSynchronize(s); }));
  row("H2D 128B + launch + sync", med([&] { cudaMemcpyAsync(dargs, hargs, 128, cudaMemcpyHostToDevice, s); empty_ind<<<1, 32, 0, s>>>(dargs); cudaStreamSynchronize(s); }));
  row("byval 1KB launch + sync", med([&] { byval<<<1, 32, 0, s>>>(b); cudaStreamSynchronize(s); }));
  cudaGraph_t g; cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal); empty<<<1, 32, 0, s>>>(nullptr); cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&ge, g, 0);
  row("graph(1 empty) launch + sync", med([&] { cudaGraphLaunch(ge, s); cudaStreamSynchronize(s); }));
  cudaGraph_t g5; cudaGraphExec_t ge5;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal); for (int i = 0; i < 5; ++i) empty<<<1, 32, 0, s>>>(nullptr); cudaStreamEndCapture(s, &g5);
  cudaGraphInstantiate(&ge5, g5, 0);
  row("graph(5 empty) launch + sync", med([&] { cudaGraphLaunch(ge5, s); cudaStreamSynchronize(s); }));
  row("5 empty launches + sync", med([&] { for (int i = 0; i < 5; ++i) empty<<<1, 32, 0, s>>>(nullptr); cudaStreamSynchronize(s); }));
  row("launch only (no sync), per launch", med([&] { empty<<<1, 32, 0, s>>>(nullptr); }, 5000)); cudaStreamSynchronize(s);
  const unsigned blocks = (unsigned)((n4 + 255) / 256);
  row("copy 2^24 f32 + sync", med([&] { copy4<<<blocks, 256, 0, s>>>((float4*)x, (float4*)y, n4); cudaStreamSynchronize(s); }, 500));
  row("W1 kernel (args in dev) + sync", med([&] { w1<<<blocks, 256, 0, s>>>(dargs, n4); cudaStreamSynchronize(s); }, 500));
  row("W1 H2D args + event + kernel + sync", med([&] { cudaMemcpyAsync(dargs, hargs, 128, cudaMemcpyHostToDevice, s); cudaEventRecord(ev, s); w1<<<blocks, 256, 0, s>>>(dargs, n4); cudaStreamSynchronize(s); }, 500));
  row("W1 byval args + sync", med([&] { w1v<<<blocks, 256, 0, s>>>(b, n4); cudaStreamSynchronize(s); }, 500));
  row("W1 byval args + spin", med([&] { w1v<<<blocks, 256, 0, s>>>(b, n4); while (cudaStreamQuery(s) == cudaErrorNotReady) {} }, 500));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  float ms = 0; cudaEventRecord(e0, s); for (int i = 0; i < 100; ++i) w1v<<<blocks, 256, 0, s>>>(b, n4); cudaEventRecord(e1, s); cudaEventSynchronize(e1); cudaEventElapsedTime(&ms, e0, e1);
  row("W1 kernel alone (events, 100 back-to-back)", ms * 10);
  cudaEventRecord(e0, s); for (int i = 0; i < 100; ++i) copy4<<<blocks, 256, 0, s>>>((float4*)x, (float4*)y, n4); cudaEventRecord(e1, s); cudaEventSynchronize(e1); cudaEventElapsedTime(&ms, e0, e1);
  row("copy 2^24 alone (events)", ms * 10);
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
