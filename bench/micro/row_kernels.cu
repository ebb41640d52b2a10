// Row-kernel microbenchmark (docs/PERFORMANCE.md, "Floors"): W2's softmax
// and W3's layer norm written the way jit/cuda/kernel_emitter.cpp emits a row
// kernel (a row kept in registers, G threads a row, RB rows a block, one
// group reduction per reduce phase), with the knobs that codegen could turn:
//   G, RB            threads a row, rows a block
//   kEarlyAffine     W3: load the weight and bias with the row (phase 0)
//   kOneBarrier      a group reduction with one barrier: every thread folds
//                    its group's warp partials (loom_group_reduce has one
//                    thread fold them, then a second barrier)
// Build: nvcc -O3 -arch=sm_90 -o row_kernels row_kernels.cu; run: ./row_kernels
// Prints per kernel: event time back to back (median of 50 runs of 20),
// and launch + cudaStreamSynchronize wall time (median of 200), with GB/s
// counted as W2/W3 count them (2 x 4 x numel bytes).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

enum { kEarlyAffine = 1, kOneBarrier = 2 };

template <class F>
__device__ __forceinline__ float warp_reduce(float v, F f) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// slot: which reduction of the kernel this is (one-barrier form: each has
// its own partials, so no barrier is needed before the next one writes).
template <int G, int MODE, class F>
__device__ __forceinline__ float group_reduce(float v, F f, float* smem, int slot) {
  v = warp_reduce(v, f);
  if (G <= 32) return v;
  constexpr int WPG = G / 32;
  const int grp = threadIdx.x / G;
  if (MODE & kOneBarrier) {
    float* partial = smem + slot * 32;
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = partial[grp * WPG];
#pragma unroll
    for (int k = 1; k < WPG; ++k) t = f(t, partial[grp * WPG + k]);
    return t;
  }
  float* partial = smem;
  float* result = smem + 64;
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x % G == 0) {
    float t = partial[grp * WPG];
    for (int k = 1; k < WPG; ++k) t = f(t, partial[grp * WPG + k]);
    result[grp] = t;
  }
  __syncthreads();
  return result[grp];
}

__device__ __forceinline__ void vload4(float* v, const float* p) {
  float4 q = *(const float4*)p;
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}
__device__ __forceinline__ void vstore4(float* p, const float* v) { *(float4*)p = make_float4(v[0], v[1], v[2], v[3]); }
__device__ __forceinline__ float fmax_nan(float a, float b) { return a != a ? a : (a > b ? a : b); }

// This thread's place: its lane within the row's G threads, its row, and
// the row's elements (row 0's for an inactive thread past the last row).
template <int N, int G, int RB>
struct RowPlace {
  int lane;
  long long row;
  bool active;
  const float* xr;
  __device__ RowPlace(const float* x, long long rows)
      : lane(threadIdx.x % G), row((long long)blockIdx.x * RB + threadIdx.x / G), active(row < rows),
        xr(x + (active ? row : 0) * N) {}
};

// N: row length (a multiple of 4 G); PT = N / (4 G) steps a thread.
template <int N, int G, int RB, int MODE>
__global__ void __launch_bounds__(G * RB) layer_norm(const float* x, const float* w, const float* b, float* y,
                                                    long long rows, float count, float eps) {
  constexpr int PT = N / (4 * G);
  __shared__ __align__(16) float smem[128];
  const auto [lane, row, active, xr] = RowPlace<N, G, RB>(x, rows);
  float s[PT * 4], ws[(MODE & kEarlyAffine) ? PT * 4 : 1], bs[(MODE & kEarlyAffine) ? PT * 4 : 1];
  float acc = 0;
#pragma unroll
  for (int j = 0; j < PT; ++j) {
    const int c = (lane + j * G) * 4;
    if (!active) continue;
    vload4(&s[j * 4], xr + c);
    if (MODE & kEarlyAffine) {
      vload4(&ws[j * 4], w + c);
      vload4(&bs[j * 4], b + c);
    }
#pragma unroll
    for (int l = 0; l < 4; ++l) acc += s[j * 4 + l];
  }
  const float mean = group_reduce<G, MODE>(acc, [](float p, float q) { return p + q; }, smem, 0) / count;
  acc = 0;
#pragma unroll
  for (int j = 0; j < PT * 4; ++j) {
    const float d = s[j] - mean;
    acc += d * d;
  }
  const float var = group_reduce<G, MODE>(acc, [](float p, float q) { return p + q; }, smem, 1) / count;
  const float rstd = 1.0f / sqrtf(var + eps);
  if (!active) return;
#pragma unroll
  for (int j = 0; j < PT; ++j) {
    const int c = (lane + j * G) * 4;
    float wv[4], bv[4], o[4];
    if (MODE & kEarlyAffine) {
#pragma unroll
      for (int l = 0; l < 4; ++l) wv[l] = ws[j * 4 + l], bv[l] = bs[j * 4 + l];
    } else {
      vload4(wv, w + c);
      vload4(bv, b + c);
    }
#pragma unroll
    for (int l = 0; l < 4; ++l) o[l] = (s[j * 4 + l] - mean) * rstd * wv[l] + bv[l];
    vstore4(y + row * N + c, o);
  }
}

template <int N, int G, int RB, int MODE>
__global__ void __launch_bounds__(G * RB) softmax(const float* x, float* y, long long rows) {
  constexpr int PT = N / (4 * G);
  __shared__ __align__(16) float smem[128];
  const auto [lane, row, active, xr] = RowPlace<N, G, RB>(x, rows);
  float s[PT * 4];
  float acc = __int_as_float(0xff800000u);
#pragma unroll
  for (int j = 0; j < PT; ++j) {
    if (!active) continue;
    vload4(&s[j * 4], xr + (lane + j * G) * 4);
#pragma unroll
    for (int l = 0; l < 4; ++l) acc = fmax_nan(acc, s[j * 4 + l]);
  }
  const float mx = group_reduce<G, MODE>(acc, [](float p, float q) { return fmax_nan(p, q); }, smem, 0);
  acc = 0;
#pragma unroll
  for (int j = 0; j < PT * 4; ++j) acc += expf(s[j] - mx);
  const float inv = 1.0f / group_reduce<G, MODE>(acc, [](float p, float q) { return p + q; }, smem, 1);
  if (!active) return;
#pragma unroll
  for (int j = 0; j < PT; ++j) {
    float o[4];
#pragma unroll
    for (int l = 0; l < 4; ++l) o[l] = expf(s[j * 4 + l] - mx) * inv;
    vstore4(y + row * N + (lane + j * G) * 4, o);
  }
}

__global__ void copy4(const float4* x, float4* y, long long n4) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n4) y[i] = x[i];
}

using Clock = std::chrono::steady_clock;
static cudaStream_t stream;

// Median event time of one launch (runs of 20 back to back), and median
// wall time of launch + synchronize.
void time_kernel(const char* name, double bytes, const std::function<void()>& launch) {
  for (int i = 0; i < 20; ++i) launch();
  cudaStreamSynchronize(stream);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> ev, wall;
  for (int r = 0; r < 50; ++r) {
    cudaEventRecord(a, stream);
    for (int i = 0; i < 20; ++i) launch();
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    ev.push_back(ms * 1000.0 / 20);
  }
  for (int r = 0; r < 200; ++r) {
    auto t0 = Clock::now();
    launch();
    cudaStreamSynchronize(stream);
    wall.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(ev.begin(), ev.end());
  std::sort(wall.begin(), wall.end());
  const double e = ev[ev.size() / 2], w = wall[wall.size() / 2];
  std::printf("%-40s kernel %8.2f us %7.1f GB/s   launch+sync %8.2f us %7.1f GB/s\n", name, e, bytes / e / 1e3, w,
              bytes / w / 1e3);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) std::printf("  error: %s\n", cudaGetErrorString(err));
}

template <int G, int RB, int MODE>
void ln_case(const char* name, const float* x, const float* w, const float* b, float* y, long long rows) {
  constexpr int N = 4096;
  const unsigned grid = (unsigned)((rows + RB - 1) / RB);
  time_kernel(name, 8.0 * rows * N, [&] {
    layer_norm<N, G, RB, MODE><<<grid, G * RB, 0, stream>>>(x, w, b, y, rows, (float)N, 1e-5f);
  });
}
template <int G, int RB, int MODE>
void sm_case(const char* name, const float* x, float* y, long long rows) {
  constexpr int N = 4096;
  const unsigned grid = (unsigned)((rows + RB - 1) / RB);
  time_kernel(name, 8.0 * rows * N, [&] { softmax<N, G, RB, MODE><<<grid, G * RB, 0, stream>>>(x, y, rows); });
}

__global__ void fill(float* p, long long n, unsigned seed) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = (h & 0xffff) / 32768.0f - 1.0f;
  }
}

int main() {
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const long long rows = 8192, n = rows * 4096, big = 1ll << 26;
  float *x, *y, *w, *b, *c0, *c1;
  cudaMalloc(&x, n * 4);
  cudaMalloc(&y, n * 4);
  cudaMalloc(&w, 4096 * 4);
  cudaMalloc(&b, 4096 * 4);
  cudaMalloc(&c0, big * 4);
  cudaMalloc(&c1, big * 4);
  fill<<<(n + 255) / 256, 256>>>(x, n, 1);
  fill<<<16, 256>>>(w, 4096, 2);
  fill<<<16, 256>>>(b, 4096, 3);
  fill<<<(big + 255) / 256, 256>>>(c0, big, 4);
  cudaDeviceSynchronize();
  time_kernel("W0 copy 2^26 f32", 8.0 * big,
              [&] { copy4<<<(unsigned)(big / 4 / 256), 256, 0, stream>>>((const float4*)c0, (float4*)c1, big / 4); });
  time_kernel("copy 8192x4096 f32 (W2/W3's bytes)", 8.0 * n,
              [&] { copy4<<<(unsigned)(n / 4 / 256), 256, 0, stream>>>((const float4*)c0, (float4*)c1, n / 4); });
  time_kernel("copy 2^24 f32 (W1's bytes)", 8.0 * (1 << 24),
              [&] { copy4<<<(1u << 22) / 256, 256, 0, stream>>>((const float4*)c0, (float4*)c1, 1 << 22); });
  sm_case<128, 2, 0>("W2 softmax G128 RB2 (loom before)", x, y, rows);
  sm_case<128, 2, kOneBarrier>("W2 softmax G128 RB2 one-barrier", x, y, rows);
  sm_case<256, 1, 0>("W2 softmax G256 RB1", x, y, rows);
  sm_case<256, 1, kOneBarrier>("W2 softmax G256 RB1 one-barrier", x, y, rows);
  sm_case<128, 4, kOneBarrier>("W2 softmax G128 RB4 one-barrier", x, y, rows);
  sm_case<512, 1, kOneBarrier>("W2 softmax G512 RB1 one-barrier", x, y, rows);
  ln_case<128, 2, 0>("W3 layernorm G128 RB2 (loom before)", x, w, b, y, rows);
  ln_case<128, 2, kOneBarrier>("W3 layernorm G128 RB2 one-barrier", x, w, b, y, rows);
  ln_case<128, 2, kEarlyAffine>("W3 layernorm G128 RB2 early affine", x, w, b, y, rows);
  ln_case<128, 2, kEarlyAffine | kOneBarrier>("W3 layernorm G128 RB2 early+1bar", x, w, b, y, rows);
  ln_case<256, 1, 0>("W3 layernorm G256 RB1", x, w, b, y, rows);
  ln_case<256, 1, kOneBarrier>("W3 layernorm G256 RB1 one-barrier", x, w, b, y, rows);
  ln_case<256, 1, kEarlyAffine | kOneBarrier>("W3 layernorm G256 RB1 early+1bar", x, w, b, y, rows);
  ln_case<128, 4, kOneBarrier>("W3 layernorm G128 RB4 one-barrier", x, w, b, y, rows);
  ln_case<512, 1, kOneBarrier>("W3 layernorm G512 RB1 one-barrier", x, w, b, y, rows);
  ln_case<512, 1, kEarlyAffine | kOneBarrier>("W3 layernorm G512 RB1 early+1bar", x, w, b, y, rows);
  ln_case<1024, 1, kOneBarrier>("W3 layernorm G1024 RB1 one-barrier", x, w, b, y, rows);
  return 0;
}
