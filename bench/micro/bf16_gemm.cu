// BF16 tensor-core GEMM (LoomGemmBf16 in kernels/cuda/gemm_template.cu, LoomGemmWg in kernels/cuda/gemm_wgmma.cu) against a float64 host reference, then timed against cuBLAS. Not built by CMake. Build (from bench/micro): nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v -DWITH_CUBLAS -o /tmp/bf16_gemm bf16_gemm.cu -lcublas (without cuBLAS: drop -DWITH_CUBLAS -lcublas); run: /tmp/bf16_gemm [--no-timing | --timing-only]
//
// The code generator hands the template to NVRTC after jit/cuda/prelude.cu.inc;
// the template itself uses none of the prelude (its own loom_i64, builtins
// only), and nvcc's implicit cuda_runtime.h declares the same builtins, so
// the include below is all it needs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "../../kernels/cuda/bfloat16.cuh"
#include "../../kernels/cuda/gemm_template.cu"
#include "../../kernels/cuda/gemm_wgmma.cu"

#ifdef WITH_CUBLAS
#include <cublas_v2.h>
#endif

#include "micro_host.h"

__global__ void convert_kernel(const float* x, uint16_t* h, float* back, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    h[i] = loom_bf16_narrow(x[i]);
    back[i] = loom_bf16_widen(h[i]);
  }
}

// ---------------------------------------------------------------------------
// Kernels: one per configuration and layout flags; C is [split][batch][M][N]
// float (split-K's workspace, or the output itself when split == 1).

template <class G, int MINB>
__global__ void __launch_bounds__(G::THREADS, MINB)
    gemm_kernel(const unsigned short* A, const unsigned short* B, float* C, LoomGemmArgs g, long long kchunk,
                long long batch) {
  G::run(
      A, B, g,
      [&](loom_i64 b, loom_i64 m, loom_i64 n, float v) { C[((blockIdx.y * batch + b) * g.M + m) * g.N + n] = v; },
      kchunk);
}

__global__ void __launch_bounds__(256) reduce_kernel(const float* W, float* C, int split, long long batch, long long M,
                                                     long long N) {
  LoomGemmReduce<float>::run(W, split, batch, M, N,
                             [&](loom_i64 b, loom_i64 m, loom_i64 n, float v) { C[(b * M + m) * N + n] = v; });
}

struct Flags {
  bool ak, av, bkm, bv;
};

// A block configuration. FULL: instantiate all 16 layout flag combinations
// (the correctness configurations); else only A row-major, B row-major,
// both vectorized (timing only).
template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_, int MINB_, bool FULL_>
struct Config {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WM_, WARPS_N = WN_, STAGES = STAGES_, MINB = MINB_;
  static constexpr bool FULL = FULL_;
  template <bool AK, bool AV, bool BKM, bool BV>
  using Gemm = LoomGemmBf16<BM, BN, BK, WM_, WN_, STAGES_, AK, AV, BKM, BV>;
  // The formula jit/cuda/gemm.cpp's gemm_shared_bytes will need.
  static size_t smem_bytes(const Flags& f) {
    const size_t a = f.ak ? size_t(BK) * (BM + 8) : size_t(BM) * (BK + 8);
    const size_t b = f.bkm ? size_t(BK) * (BN + 8) : size_t(BN) * (BK + 8);
    return size_t(STAGES) * (a + b) * 2;
  }
  static int threads() { return 32 * WM_ * WN_; }
  static void name(char* s, size_t n) { std::snprintf(s, n, "%dx%dx%d w%dx%d s%d", BM, BN, BK, WM_, WN_, STAGES_); }
  static bool supports(const Flags&) { return true; }
};

// A LoomGemmWg configuration (wgmma, sm_90a): 16-byte copies only, so its
// other layouts are never launched (they instantiate the vectorized form).
template <int BM_, int BN_, int STAGES_>
struct WgConfig {
  static constexpr int BM = BM_, BN = BN_, BK = 64, STAGES = STAGES_, MINB = 1;
  static constexpr bool FULL = true;
  template <bool AK, bool AV, bool BKM, bool BV>
  using Gemm = LoomGemmWg<unsigned short, BM, BN, STAGES, AK, true, BKM, true>;
  static size_t smem_bytes(const Flags&) { return size_t(STAGES) * (BM + BN) * BK * 2 + 1024; }
  static int threads() { return 2 * BM; }
  static void name(char* s, size_t n) { std::snprintf(s, n, "%dx%dx64 wgmma s%d", BM, BN, STAGES); }
  static bool supports(const Flags& f) { return f.av && f.bv; }
};

template <class C, bool AK, bool AV, bool BKM, bool BV>
static void launch_as(const uint16_t* A, const uint16_t* B, float* out, const LoomGemmArgs& g, long long kchunk,
                      int split, int batch, cudaStream_t st) {
  typedef typename C::template Gemm<AK, AV, BKM, BV> G;
  auto kernel = gemm_kernel<G, C::MINB>;
  const size_t smem = size_t(G::SMEM_BYTES);
  if (smem != C::smem_bytes(Flags{AK, AV, BKM, BV})) {
    std::fprintf(stderr, "shared-memory formula disagrees with the template\n");
    std::exit(2);
  }
  static bool attr = false;  // once per instantiation
  if (!attr) {
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    attr = true;
  }
  const long long tiles = ((g.M + C::BM - 1) / C::BM) * ((g.N + C::BN - 1) / C::BN);
  kernel<<<dim3(unsigned(std::max(tiles, 1LL)), unsigned(split), unsigned(batch)), G::THREADS, smem, st>>>(
      (const unsigned short*)A, (const unsigned short*)B, out, g, kchunk, batch);
  CHECK(cudaGetLastError());
}

// The runtime flags to a template instantiation, one bool at a time.
template <class C, bool... Fixed>
static void dispatch(const Flags& f, const uint16_t* A, const uint16_t* B, float* out, const LoomGemmArgs& g,
                     long long kchunk, int split, int batch, cudaStream_t st) {
  constexpr int n = sizeof...(Fixed);
  if constexpr (n == 4) {
    launch_as<C, Fixed...>(A, B, out, g, kchunk, split, batch, st);
  } else if constexpr (!C::FULL) {
    if (f.ak || !f.av || !f.bkm || !f.bv) {
      std::fprintf(stderr, "timing-only configuration: NN vectorized only\n");
      std::exit(2);
    }
    launch_as<C, false, true, true, true>(A, B, out, g, kchunk, split, batch, st);
  } else {
    const bool next = n == 0 ? f.ak : n == 1 ? f.av : n == 2 ? f.bkm : f.bv;
    if (next)
      dispatch<C, Fixed..., true>(f, A, B, out, g, kchunk, split, batch, st);
    else
      dispatch<C, Fixed..., false>(f, A, B, out, g, kchunk, split, batch, st);
  }
}

// ---------------------------------------------------------------------------
// Problems: logical A [batch][M][K], B [batch or 1][K][N] of bf16 values, and
// the float64 reference of the rows it checks.

struct Problem {
  int batch, M, N, K;
  bool bcast_b = false;  // one B for every batch (batch stride 0)
  std::vector<uint16_t> a, b;
  std::vector<double> ref, mag;  // per checked row: C and sum over k of |a b| (the error scale)
  std::vector<int> rows;         // checked rows of each batch (all, unless the product is huge)
  std::vector<int> row_slot;     // row -> index into rows, or -1
};

static void make_problem(Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto fill = [&](std::vector<uint16_t>& v, size_t n) {
    v.resize(n);
    for (auto& x : v) {
      uint16_t h;
      do h = float_to_bf16(nd(rng));
      while ((h & 0x7fff) == 0);  // never zero: a dropped term must show
      x = h;
    }
  };
  const int bb = p.bcast_b ? 1 : p.batch;
  fill(p.a, size_t(p.batch) * p.M * p.K);
  fill(p.b, size_t(bb) * p.K * p.N);
  const double work = double(p.batch) * p.M * p.N * p.K;
  p.row_slot.assign(p.M, -1);
  for (int m = 0; m < p.M; ++m)
    if (work <= 2e9 || m < 136 || m >= p.M - 136 || m % 97 == 0) {
      p.row_slot[m] = int(p.rows.size());
      p.rows.push_back(m);
    }
  const size_t R = p.rows.size();
  p.ref.assign(size_t(p.batch) * R * p.N, 0.0);
  p.mag.assign(size_t(p.batch) * R * p.N, 0.0);
  std::vector<float> af(p.a.size()), bf(p.b.size());
  for (size_t i = 0; i < af.size(); ++i) af[i] = bf16_to_float(p.a[i]);
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = bf16_to_float(p.b[i]);
  const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < nt; ++t)
    pool.emplace_back([&, t] {
      for (size_t job = t; job < size_t(p.batch) * R; job += nt) {
        const int bi = int(job / R), m = p.rows[job % R];
        const float* arow = &af[(size_t(bi) * p.M + m) * p.K];
        const float* bmat = &bf[size_t(p.bcast_b ? 0 : bi) * p.K * p.N];
        double* c = &p.ref[job * p.N];
        double* s = &p.mag[job * p.N];
        for (int k = 0; k < p.K; ++k) {
          const double av = arow[k];
          const float* brow = bmat + size_t(k) * p.N;
          for (int n = 0; n < p.N; ++n) {
            c[n] += av * brow[n];
            s[n] += std::fabs(av * brow[n]);
          }
        }
      }
    });
  for (auto& th : pool) th.join();
}

// How one run stores the operands: which dim is contiguous, whether the
// leading dimensions are padded to 8 (so 16-byte copies are allowed), and
// an element offset (1 misaligns every row: the element-copy path).
struct Layout {
  bool ak, bkm;
  bool pad_a, pad_b;
  int off_a, off_b;
};

struct Packed {
  std::vector<uint16_t> a, b;
  LoomGemmArgs g;
  Flags f;
};

static long long round8(long long x) { return (x + 7) / 8 * 8; }

// As jit/cuda/gemm.cpp's gemm_problem: a dim of extent 1 has stride 0 and
// counts as contiguous; 16-byte copies need the contiguous stride 1 and
// every other stride and the offset multiples of 8 (bases are aligned).
static Packed pack(const Problem& p, const Layout& l) {
  Packed r;
  LoomGemmArgs& g = r.g;
  g.M = p.M, g.N = p.N, g.K = p.K;
  const long long lda = l.ak ? (l.pad_a ? round8(p.M) : p.M) : (l.pad_a ? round8(p.K) : p.K);
  g.a_m = l.ak ? 1 : lda, g.a_k = l.ak ? lda : 1;
  g.a_b = round8(lda * (l.ak ? p.K : p.M)) + (l.pad_a ? 0 : 1);
  const long long ldb = l.bkm ? (l.pad_b ? round8(p.N) : p.N) : (l.pad_b ? round8(p.K) : p.K);
  g.b_n = l.bkm ? 1 : ldb, g.b_k = l.bkm ? ldb : 1;
  g.b_b = p.bcast_b ? 0 : round8(ldb * (l.bkm ? p.K : p.N)) + (l.pad_b ? 0 : 1);
  // Stored with the original strides; the kernel sees extent-1 strides as 0.
  const long long sam = g.a_m, sak = g.a_k, sbn = g.b_n, sbk = g.b_k;
  if (p.M == 1) g.a_m = 0;
  if (p.N == 1) g.b_n = 0;
  if (p.K == 1) g.a_k = g.b_k = 0;
  auto vec = [](long long off, long long other, long long bs) { return off % 8 == 0 && other % 8 == 0 && bs % 8 == 0; };
  r.f.ak = l.ak, r.f.bkm = l.bkm;
  r.f.av = l.pad_a && vec(l.off_a, l.ak ? g.a_k : g.a_m, g.a_b);
  r.f.bv = l.pad_b && vec(l.off_b, l.bkm ? g.b_k : g.b_n, g.b_b);
  // Every element that is no operand value is a NaN: a read of one shows.
  const int bb = p.bcast_b ? 1 : p.batch;
  r.a.assign(l.off_a + size_t(p.batch) * g.a_b + 64, 0x7fc0);
  r.b.assign(l.off_b + size_t(bb) * std::max(g.b_b, 1LL) + size_t(ldb) * (l.bkm ? p.K : p.N) + 64, 0x7fc0);
  for (int bi = 0; bi < p.batch; ++bi)
    for (int m = 0; m < p.M; ++m)
      for (int k = 0; k < p.K; ++k)
        r.a[l.off_a + bi * g.a_b + m * sam + k * sak] = p.a[(size_t(bi) * p.M + m) * p.K + k];
  for (int bi = 0; bi < bb; ++bi)
    for (int k = 0; k < p.K; ++k)
      for (int n = 0; n < p.N; ++n)
        r.b[l.off_b + bi * g.b_b + k * sbk + n * sbn] = p.b[(size_t(bi) * p.K + k) * p.N + n];
  return r;
}

// ---------------------------------------------------------------------------
// One correctness case: pack, poison, run (and reduce), check.

static int passed = 0, failed = 0;

template <class C>
static void check_case(const Problem& p, const Layout& l, int split) {
  const Packed pk = pack(p, l);
  if (!C::supports(pk.f)) return;
  const LoomGemmArgs& g = pk.g;
  long long kchunk = 0;
  if (split > 1) {  // as jit/cuda/gemm.cpp's gemm_split_chunk
    const long long per = (p.K + split - 1) / split;
    kchunk = std::max((per + C::BK - 1) / C::BK, 1LL) * C::BK;
  }
  const size_t mn = size_t(p.batch) * p.M * p.N, guard = 1024;
  uint16_t *dA, *dB;
  float *dC, *dW = nullptr;
  CHECK(cudaMalloc(&dA, pk.a.size() * 2));
  CHECK(cudaMalloc(&dB, pk.b.size() * 2));
  CHECK(cudaMalloc(&dC, (mn + guard) * 4));
  CHECK(cudaMemcpy(dA + 0, pk.a.data(), pk.a.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dB + 0, pk.b.data(), pk.b.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dC, 0xff, (mn + guard) * 4));  // all-ones: a NaN no product makes
  if (split > 1) {
    CHECK(cudaMalloc(&dW, (split * mn + guard) * 4));
    CHECK(cudaMemset(dW, 0xff, (split * mn + guard) * 4));
  }
  dispatch<C>(pk.f, dA + l.off_a, dB + l.off_b, split > 1 ? dW : dC, g, kchunk, split, p.batch, 0);
  if (split > 1) reduce_kernel<<<264, 256>>>(dW, dC, split, p.batch, p.M, p.N);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> out(mn + guard);
  CHECK(cudaMemcpy(out.data(), dC, out.size() * 4, cudaMemcpyDeviceToHost));
  bool guard_ok = true;
  if (split > 1) {  // the workspace's guard too
    std::vector<float> wg(guard);
    CHECK(cudaMemcpy(wg.data(), dW + split * mn, guard * 4, cudaMemcpyDeviceToHost));
    for (float v : wg) guard_ok &= *reinterpret_cast<uint32_t*>(&v) == 0xffffffffu;
  }
  for (size_t i = mn; i < mn + guard; ++i) guard_ok &= *reinterpret_cast<uint32_t*>(&out[i]) == 0xffffffffu;
  size_t unwritten = 0, bad = 0;
  double err2 = 0, ref2 = 0, max_abs = 0;
  const size_t R = p.rows.size();
  for (int bi = 0; bi < p.batch; ++bi)
    for (int m = 0; m < p.M; ++m)
      for (int n = 0; n < p.N; ++n) {
        const float v = out[(size_t(bi) * p.M + m) * p.N + n];
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        if (bits == 0xffffffffu || !std::isfinite(v)) {
          ++unwritten;
          continue;
        }
        const int slot = p.row_slot[m];
        if (slot < 0) continue;
        const size_t j = (size_t(bi) * R + slot) * p.N + n;
        const double e = std::fabs(double(v) - p.ref[j]);
        err2 += e * e, ref2 += p.ref[j] * p.ref[j];
        max_abs = std::max(max_abs, e);
        if (e > 1e-5 * p.mag[j] + 1e-30) ++bad;  // f32 accumulation error is far below this; a wrong term is far above
      }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  const bool ok = unwritten == 0 && bad == 0 && guard_ok && rel < 1e-5;
  char cname[64];
  C::name(cname, sizeof cname);
  std::printf("%s  %-22s b%d %4dx%4dx%4d A%s%s B%s%s%s split %d: rel %.2e max abs %.2e%s%s%s\n", ok ? "PASS" : "FAIL",
              cname, p.batch, p.M, p.N, p.K, pk.f.ak ? "[k][m]" : "[m][k]", pk.f.av ? "v" : "e",
              pk.f.bkm ? "[k][n]" : "[n][k]", pk.f.bv ? "v" : "e", p.bcast_b ? " bcast" : "", split, rel, max_abs,
              unwritten ? " UNWRITTEN" : "", bad ? " BAD-ELEMENTS" : "", guard_ok ? "" : " GUARD-OVERWRITTEN");
  if (!ok && (unwritten || bad)) std::printf("      unwritten %zu, out of tolerance %zu\n", unwritten, bad);
  (ok ? passed : failed)++;
  CHECK(cudaFree(dA));
  CHECK(cudaFree(dB));
  CHECK(cudaFree(dC));
  if (dW) CHECK(cudaFree(dW));
}

static void check_conversions() {
  std::vector<float> x = {0.f, -0.f, 1.f, -1.5f, 3.14159265f, 1e-40f, -1e-45f, 3.3895314e38f, 3.40282347e38f,
                          -3.40282347e38f, INFINITY, -INFINITY, NAN, -NAN};
  const uint32_t raw[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f817fffu, 0x7f7f8000u, 0x7fa00001u, 0xff800001u,
                          0x00008000u, 0x00018000u};  // ties both ways, just off ties, overflow tie, signalling NaNs
  for (uint32_t u : raw) {
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  const int n = int(x.size());
  float *dx, *dback;
  uint16_t* dh;
  CHECK(cudaMalloc(&dx, n * 4));
  CHECK(cudaMalloc(&dback, n * 4));
  CHECK(cudaMalloc(&dh, n * 2));
  CHECK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
  convert_kernel<<<(n + 255) / 256, 256>>>(dx, dh, dback, n);
  CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> h(n);
  std::vector<float> back(n);
  CHECK(cudaMemcpy(h.data(), dh, n * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(back.data(), dback, n * 4, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) {
    const uint16_t want = float_to_bf16(x[i]);
    const float wb = bf16_to_float(want);
    if (h[i] != want || std::memcmp(&back[i], &wb, 4) != 0) {
      if (wrong++ < 5) std::printf("      bf16(%a) = %04x, want %04x\n", x[i], h[i], want);
    }
  }
  const bool nan_ok = (float_to_bf16(-NAN) & 0x8000) && std::isnan(bf16_to_float(float_to_bf16(-NAN)));
  const bool ok = wrong == 0 && nan_ok;
  std::printf("%s  loom_bf16_narrow / loom_bf16_widen on %d values (ties, overflow, NaNs, random bits)\n",
              ok ? "PASS" : "FAIL", n);
  (ok ? passed : failed)++;
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dback));
  CHECK(cudaFree(dh));
}

// ---------------------------------------------------------------------------
// Timing: 4096^3, A row-major, B row-major.

typedef Config<128, 128, 32, 2, 4, 4, 1, true> C128x128;
typedef Config<128, 256, 32, 2, 4, 3, 1, true> C128x256;
typedef Config<64, 64, 32, 2, 2, 4, 1, true> C64x64;
typedef Config<128, 128, 32, 2, 4, 3, 2, false> C128x128s3b2;
typedef Config<128, 128, 64, 2, 4, 3, 1, false> C128x128k64;
typedef Config<128, 256, 64, 2, 4, 3, 1, false> C128x256k64;
typedef Config<256, 128, 32, 4, 2, 3, 1, false> C256x128;
typedef Config<128, 128, 32, 2, 4, 4, 2, false> C128x128s4b2;
typedef Config<128, 128, 64, 2, 4, 3, 2, false> C128x128k64b2;
typedef Config<128, 256, 64, 2, 4, 4, 1, false> C128x256k64s4;
typedef Config<64, 64, 32, 2, 2, 4, 4, false> C64x64b4;
typedef Config<64, 128, 32, 2, 2, 4, 2, false> C64x128b2;
typedef WgConfig<128, 256, 4> W128x256;
typedef WgConfig<128, 256, 3> W128x256s3;
typedef WgConfig<128, 128, 4> W128x128;
typedef WgConfig<128, 128, 6> W128x128s6;
typedef WgConfig<64, 128, 4> W64x128;
typedef WgConfig<64, 256, 4> W64x256;

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
static float time_ms(F&& launch) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> ts;
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaEventRecord(e0));
    launch();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms);
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return median(ts);
}

struct TimingBufs {
  uint16_t *A, *B;
  float* C;
  int n;
};

template <class C>
static void time_config(const TimingBufs& t, double cublas_tflops) {
  LoomGemmArgs g;
  g.M = g.N = g.K = t.n;
  g.a_m = t.n, g.a_k = 1, g.a_b = 0;
  g.b_k = t.n, g.b_n = 1, g.b_b = 0;
  const Flags f{false, true, true, true};
  const float ms = time_ms([&] { dispatch<C>(f, t.A, t.B, t.C, g, 0, 1, 1, 0); });
  const double tf = 2.0 * t.n * t.n * double(t.n) / (ms * 1e-3) / 1e12;
  char cname[64];
  C::name(cname, sizeof cname);
  std::printf("  %-22s minb %d  %4d threads  %6zu B shared  %.3f ms  %6.1f TFLOP/s", cname, C::MINB, C::threads(),
              C::smem_bytes(f), ms, tf);
  if (cublas_tflops > 0) std::printf("  (%.0f%% of cuBLAS)", 100.0 * tf / cublas_tflops);
  std::printf("\n");
}

static void timing() {
  const int n = 4096;
  TimingBufs t{nullptr, nullptr, nullptr, n};
  std::vector<uint16_t> h(size_t(n) * n);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : h) x = float_to_bf16(nd(rng));
  CHECK(cudaMalloc(&t.A, h.size() * 2));
  CHECK(cudaMalloc(&t.B, h.size() * 2));
  CHECK(cudaMalloc(&t.C, h.size() * 4));
  CHECK(cudaMemcpy(t.A, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(t.B, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  std::printf("timing: %dx%dx%d, A row-major, B row-major, float output; median of 20 after 3 warm-ups\n", n, n, n);
  double cublas_tf = 0;
#ifdef WITH_CUBLAS
  {
    cublasHandle_t hb;
    if (cublasCreate(&hb) != CUBLAS_STATUS_SUCCESS) std::exit(2);
    const float alpha = 1.f, beta = 0.f;
    // Row-major C = A B is column-major C^T = B^T A^T: B first.
    auto run = [&] {
      const cublasStatus_t s =
          cublasGemmEx(hb, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, t.B, CUDA_R_16BF, n, t.A, CUDA_R_16BF, n, &beta,
                       t.C, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (s != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "cublasGemmEx: status %d\n", int(s));
        std::exit(2);
      }
    };
    const float ms = time_ms(run);
    cublas_tf = 2.0 * n * n * double(n) / (ms * 1e-3) / 1e12;
    std::printf("  %-22s                                        %.3f ms  %6.1f TFLOP/s\n", "cuBLAS GemmEx bf16->f32",
                ms, cublas_tf);
    cublasDestroy(hb);
  }
#endif
  time_config<W128x256>(t, cublas_tf);
  time_config<W128x256s3>(t, cublas_tf);
  time_config<W128x128>(t, cublas_tf);
  time_config<W128x128s6>(t, cublas_tf);
  time_config<W64x128>(t, cublas_tf);
  time_config<W64x256>(t, cublas_tf);
  time_config<C128x128>(t, cublas_tf);
  time_config<C128x128s3b2>(t, cublas_tf);
  time_config<C128x128s4b2>(t, cublas_tf);
  time_config<C128x128k64b2>(t, cublas_tf);
  time_config<C128x128k64>(t, cublas_tf);
  time_config<C128x256>(t, cublas_tf);
  time_config<C128x256k64>(t, cublas_tf);
  time_config<C128x256k64s4>(t, cublas_tf);
  time_config<C256x128>(t, cublas_tf);
  time_config<C64x64>(t, cublas_tf);
  time_config<C64x64b4>(t, cublas_tf);
  time_config<C64x128b2>(t, cublas_tf);
  CHECK(cudaFree(t.A));
  CHECK(cudaFree(t.B));
  CHECK(cudaFree(t.C));
}

// ---------------------------------------------------------------------------

template <class C>
static void check_config(const Problem& p, const std::vector<Layout>& layouts, const std::vector<int>& splits) {
  for (const Layout& l : layouts)
    for (int s : splits) check_case<C>(p, l, s);
}

int main(int argc, char** argv) {
  const bool no_timing = argc > 1 && !std::strcmp(argv[1], "--no-timing");
  const bool timing_only = argc > 1 && !std::strcmp(argv[1], "--timing-only");
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (!timing_only) {
    check_conversions();
    // Every layout: 4 vectorized (A [m][k] or [k][m] x B [k][n] or [n][k],
    // leading dims padded to 8), then element copies: a misaligned offset on
    // A, on B, on both.
    const std::vector<Layout> all = {
        {false, true, true, true, 0, 0},  {true, true, true, true, 0, 0},   {false, false, true, true, 0, 0},
        {true, false, true, true, 0, 0},  {false, true, false, true, 1, 0}, {true, false, true, false, 0, 1},
        {false, true, false, false, 1, 1}};
    const std::vector<Layout> some = {all[0], all[3], all[6]};
    struct Shape {
      int batch, M, N, K;
      bool bcast;
    };
    const std::vector<Shape> shapes = {{1, 1, 1, 1, false},      {1, 7, 7, 7, false},       {1, 1, 63, 65, false},
                                       {1, 63, 1, 1000, false},  {1, 65, 63, 7, false},     {1, 63, 65, 63, false},
                                       {1, 129, 65, 1000, false}, {1, 1000, 1000, 1000, false}, {1, 4096, 63, 65, false},
                                       {1, 65, 4096, 1000, false}, {3, 65, 63, 1000, false}, {3, 1000, 7, 63, false},
                                       {3, 65, 130, 200, true},   {1, 4096, 4096, 4096, false}};
    uint64_t seed = 1;
    for (const Shape& s : shapes) {
      Problem p;
      p.batch = s.batch, p.M = s.M, p.N = s.N, p.K = s.K, p.bcast_b = s.bcast;
      make_problem(p, seed++);
      const bool huge = double(s.M) * s.N * s.K > 1e10;
      check_config<C128x128>(p, huge ? some : all, {1});
      check_config<C128x256>(p, huge ? some : all, {1});
      check_config<C64x64>(p, huge ? some : all, {1});
      check_config<W128x256>(p, huge ? some : all, {1});
      check_config<W128x128>(p, huge ? some : all, {1});
      check_config<W64x128>(p, huge ? some : all, {1});
      if (s.K >= 63 && !huge) {  // split-K through LoomGemmReduce
        check_config<C64x64>(p, all, {2, 5});
        check_config<C128x128>(p, {all[0], all[5]}, {2, 5});
        check_config<W128x128>(p, {all[0], all[1]}, {2, 5});
      }
    }
  }
  if (!no_timing) timing();
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
