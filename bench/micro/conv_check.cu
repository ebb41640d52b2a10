// The implicit-GEMM convolution kernels (kernels/cuda/conv.cu: fwd,
// grad_input, grad_weight for f32, f64, bf16, f16), launched through their
// extern "C" entry points with meta blocks laid out as meta_layout.h's
// `conv`, against a float64 host reference; then the bfloat16 kernels timed
// on the ResNet-18 CIFAR shapes at batch 128. Not built by CMake.
// Build and run (from the repository root):
//   nvcc -O3 -std=c++17 -arch=sm_90a -I. -o conv_check bench/micro/conv_check.cu && ./conv_check [--quick]
// --quick skips the timing. -DLOOM_CONV_FWD_BLOCKED=1 builds fwd with its
// other k order (channel-blocked instead of 16-byte weight chunks), to time
// the two. grad_weight's timing leaves out the sum of its S partial sums.
//
// NVRTC compiles conv.cu after kernels/cuda/bfloat16.cuh and
// kernels/cuda/meta_layout.h with no includes; nvcc's implicit
// cuda_runtime.h declares the same builtins, so including the three files
// in that order is all this needs (meta_layout.h's functions are
// host-and-device here, as with ir/philox.h in front of it under NVRTC).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define LOOM_HOST_DEVICE __host__ __device__
#include "kernels/cuda/bfloat16.cuh"
#include "kernels/cuda/meta_layout.h"
#include "kernels/cuda/conv.cu"

#include "bench/micro/micro_host.h"

namespace cm = loom::kernels::cuda::meta_layout::conv;

// ---------------------------------------------------------------------------
// Host float16 (round to nearest even through double arithmetic, unlike
// loom_f16_narrow's integer steps).
static float f16_to_float(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) v = m ? NAN : INFINITY;
  else if (e == 0) v = std::ldexp(double(m), -24);
  else v = std::ldexp(double(1024 + m), e - 25);
  return float(sign ? -v : v);
}
static uint16_t float_to_f16(float f) {
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (a < std::ldexp(1.0, -14)) return uint16_t(sign | int(std::nearbyint(a * std::ldexp(1.0, 24))));
  int e;
  const double m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  int q = int(std::nearbyint(m * 2048));
  if (q == 2048) q = 1024, ++e;
  const int be = e - 1 + 15;
  if (be >= 31) return uint16_t(sign | 0x7c00);
  return uint16_t(sign | (be << 10) | (q - 1024));
}

enum Dtype { F32 = 0, F64 = 1, BF16 = 2, F16 = 3 };
static const char* dtype_name(int d) { return d == F32 ? "f32" : d == F64 ? "f64" : d == BF16 ? "bf16" : "f16"; }
static size_t dtype_size(int d) { return d == F32 ? 4 : d == F64 ? 8 : 2; }
enum Kind { FWD = 0, GRAD_INPUT = 1, GRAD_WEIGHT = 2 };
static const char* kind_name(int k) { return k == FWD ? "fwd" : k == GRAD_INPUT ? "grad_input" : "grad_weight"; }

typedef void (*Entry)(void* const*, const double*, const long long*, long long*, const long long*);
static const Entry kEntries[4][3] = {
    {loom_conv2d_fwd_f32, loom_conv2d_grad_input_f32, loom_conv2d_grad_weight_f32},
    {loom_conv2d_fwd_f64, loom_conv2d_grad_input_f64, loom_conv2d_grad_weight_f64},
    {loom_conv2d_fwd_bf16, loom_conv2d_grad_input_bf16, loom_conv2d_grad_weight_bf16},
    {loom_conv2d_fwd_f16, loom_conv2d_grad_input_f16, loom_conv2d_grad_weight_f16},
};

struct Shape {
  int N, C, H, W, O, KH, KW, sH, sW, pH, pW, dH, dW, G;
  int OH() const { return (H + 2 * pH - dH * (KH - 1) - 1) / sH + 1; }
  int OW() const { return (W + 2 * pW - dW * (KW - 1) - 1) / sW + 1; }
  long long x_numel() const { return (long long)N * C * H * W; }
  long long w_numel() const { return (long long)O * (C / G) * KH * KW; }
  long long y_numel() const { return (long long)N * O * OH() * OW(); }
  // 2 N O OH OW (C/G) KH KW: the products of each of the three kernels.
  double flops() const { return 2.0 * N * O * OH() * OW() * (C / G) * KH * KW; }
};

// The GEMM sizes meta_layout.h's conv text gives, for the grid.
static void gemm_dims(const Shape& s, int kind, int S, long long& M, long long& cols) {
  const long long Cg = s.C / s.G, Og = s.O / s.G;
  if (kind == FWD) M = (long long)s.N * s.OH() * s.OW(), cols = Og;
  else if (kind == GRAD_INPUT) M = (long long)s.N * s.H * s.W, cols = Cg;
  else M = Cg * s.KH * s.KW, cols = Og;
  (void)S;
}

static std::vector<long long> make_meta(const Shape& s, int S, long long a_off_field, long long b_off_field) {
  std::vector<long long> m(cm::kCount, 0);
  m[cm::kOut] = 0, m[cm::kA] = 1, m[cm::kAOffset] = a_off_field, m[cm::kB] = 2, m[cm::kBOffset] = b_off_field;
  m[cm::kN] = s.N, m[cm::kC] = s.C, m[cm::kH] = s.H, m[cm::kW] = s.W, m[cm::kO] = s.O;
  m[cm::kOH] = s.OH(), m[cm::kOW] = s.OW(), m[cm::kKH] = s.KH, m[cm::kKW] = s.KW;
  m[cm::kStrideH] = s.sH, m[cm::kStrideW] = s.sW, m[cm::kPadH] = s.pH, m[cm::kPadW] = s.pW;
  m[cm::kDilH] = s.dH, m[cm::kDilW] = s.dW, m[cm::kGroups] = s.G, m[cm::kSplits] = S;
  return m;
}

// One prepared launch: the device meta and buffer table stay allocated until freed.
struct Launch {
  Entry fn;
  dim3 grid;
  long long* meta = nullptr;
  void** bufs = nullptr;
  void run(const double* fs, const long long* is, long long* err) const {
    fn<<<grid, cm::kThreads>>>(bufs, fs, is, err, meta);
  }
  void free() {
    CHECK(cudaFree(meta));
    CHECK(cudaFree(bufs));
  }
};
static Launch prepare(const Shape& s, int dtype, int kind, int S, void* out, void* a, long long a_field, void* b,
                      long long b_field) {
  Launch l;
  l.fn = kEntries[dtype][kind];
  long long M, cols;
  gemm_dims(s, kind, S, M, cols);
  l.grid = dim3(unsigned((M + cm::kTileM - 1) / cm::kTileM), unsigned((cols + cm::kTileN - 1) / cm::kTileN),
                unsigned(s.G * (kind == GRAD_WEIGHT ? S : 1)));
  const std::vector<long long> meta = make_meta(s, kind == GRAD_WEIGHT ? S : 1, a_field, b_field);
  CHECK(cudaMalloc(&l.meta, meta.size() * sizeof(long long)));
  CHECK(cudaMemcpy(l.meta, meta.data(), meta.size() * sizeof(long long), cudaMemcpyHostToDevice));
  void* host_bufs[3] = {out, a, b};
  CHECK(cudaMalloc(&l.bufs, sizeof(host_bufs)));
  CHECK(cudaMemcpy(l.bufs, host_bufs, sizeof(host_bufs), cudaMemcpyHostToDevice));
  return l;
}

// ---------------------------------------------------------------------------
// Host data: values rounded to the dtype (doubles for the reference, the
// dtype's bytes for the device).
struct HostTensor {
  std::vector<double> v;
  std::vector<unsigned char> bytes;  // the dtype's encoding, `offset` elements of garbage first
};
static HostTensor random_tensor(long long n, int dtype, long long offset, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> U(-1.0, 1.0);
  HostTensor t;
  t.v.resize(n);
  const size_t es = dtype_size(dtype);
  t.bytes.resize((n + offset) * es);
  for (long long i = 0; i < n + offset; ++i) {
    const double d = U(rng);
    double r = d;
    unsigned char* p = t.bytes.data() + i * es;
    if (dtype == F32) {
      const float f = float(d);
      r = f;
      std::memcpy(p, &f, 4);
    } else if (dtype == F64) {
      std::memcpy(p, &d, 8);
    } else if (dtype == BF16) {
      const uint16_t h = float_to_bf16(float(d));
      r = bf16_to_float(h);
      std::memcpy(p, &h, 2);
    } else {
      const uint16_t h = float_to_f16(float(d));
      r = f16_to_float(h);
      std::memcpy(p, &h, 2);
    }
    if (i >= offset) t.v[i - offset] = r;
  }
  return t;
}
static double read_value(const unsigned char* p, int dtype) {
  if (dtype == F32) { float f; std::memcpy(&f, p, 4); return f; }
  if (dtype == F64) { double d; std::memcpy(&d, p, 8); return d; }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return dtype == BF16 ? bf16_to_float(h) : f16_to_float(h);
}
static void* to_device(const std::vector<unsigned char>& b) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, std::max<size_t>(b.size(), 1)));
  CHECK(cudaMemcpy(p, b.data(), b.size(), cudaMemcpyHostToDevice));
  return p;
}

// The float64 reference of all three, with sum |a||b| per output element.
struct Reference {
  std::vector<double> y, y_abs, dx, dx_abs, dw, dw_abs;  // dw: [S, O, Cg, KH, KW]
};
static Reference reference(const Shape& s, int S, const std::vector<double>& x, const std::vector<double>& w,
                           const std::vector<double>& dy) {
  Reference r;
  const int OH = s.OH(), OW = s.OW(), Cg = s.C / s.G, Og = s.O / s.G;
  r.y.assign(s.y_numel(), 0), r.y_abs.assign(s.y_numel(), 0);
  r.dx.assign(s.x_numel(), 0), r.dx_abs.assign(s.x_numel(), 0);
  r.dw.assign(S * s.w_numel(), 0), r.dw_abs.assign(S * s.w_numel(), 0);
  for (int n = 0; n < s.N; ++n) {
    int sp = 0;
    while (!((long long)sp * s.N / S <= n && n < (long long)(sp + 1) * s.N / S)) ++sp;
    for (int o = 0; o < s.O; ++o) {
      const int g = o / Og;
      for (int oh = 0; oh < OH; ++oh)
        for (int ow = 0; ow < OW; ++ow) {
          const long long yi = (((long long)n * s.O + o) * OH + oh) * OW + ow;
          for (int c = 0; c < Cg; ++c)
            for (int kh = 0; kh < s.KH; ++kh)
              for (int kw = 0; kw < s.KW; ++kw) {
                const int ih = oh * s.sH - s.pH + kh * s.dH, iw = ow * s.sW - s.pW + kw * s.dW;
                if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                const long long xi = (((long long)n * s.C + g * Cg + c) * s.H + ih) * s.W + iw;
                const long long wi = (((long long)o * Cg + c) * s.KH + kh) * s.KW + kw;
                r.y[yi] += x[xi] * w[wi], r.y_abs[yi] += std::fabs(x[xi] * w[wi]);
                r.dx[xi] += dy[yi] * w[wi], r.dx_abs[xi] += std::fabs(dy[yi] * w[wi]);
                r.dw[sp * s.w_numel() + wi] += dy[yi] * x[xi], r.dw_abs[sp * s.w_numel() + wi] += std::fabs(dy[yi] * x[xi]);
              }
        }
    }
  }
  return r;
}

// max over elements of |got - ref| / sum|a||b|; an element with sum 0 must be exactly 0.
static bool compare(const std::vector<unsigned char>& got, int out_dtype, const std::vector<double>& ref,
                    const std::vector<double>& abs, double tol, double& worst) {
  bool ok = true;
  worst = 0;
  const size_t es = dtype_size(out_dtype);
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = read_value(got.data() + i * es, out_dtype), d = std::fabs(v - ref[i]);
    if (!(d <= tol * abs[i])) {
      if (ok) std::printf("    first bad element %zu: got %.9g, want %.9g (sum |a||b| %.3g)\n", i, v, ref[i], abs[i]);
      ok = false;
      worst = INFINITY;
    } else if (abs[i] > 0) {
      worst = std::max(worst, d / abs[i]);
    }
  }
  return ok;
}

static double tolerance(int dtype) { return dtype == F32 ? 1e-5 : dtype == F64 ? 1e-12 : dtype == BF16 ? 1e-2 : 2e-3; }

struct Case {
  Shape s;
  long long x_off, w_off, y_off;  // element offsets of the inputs inside their buffers
  bool slot_offsets;              // pass the A offset as runtime scalar slot 0, B's as slot 1
};

static std::string describe(const Shape& s) {
  char b[256];
  std::snprintf(b, sizeof b, "N%d C%d %dx%d O%d k%dx%d s%d,%d p%d,%d d%d,%d G%d -> %dx%d", s.N, s.C, s.H, s.W, s.O, s.KH,
                s.KW, s.sH, s.sW, s.pH, s.pW, s.dH, s.dW, s.G, s.OH(), s.OW());
  return b;
}

// Runs one kernel and returns its output's bytes.
static std::vector<unsigned char> run_kernel(const Shape& s, int dtype, int kind, int S, void* a, long long a_field,
                                             void* b, long long b_field, long long out_numel, int out_dtype,
                                             const long long* d_is, const double* d_fs, long long* d_err) {
  const size_t bytes = out_numel * dtype_size(out_dtype);
  void* out = nullptr;
  CHECK(cudaMalloc(&out, std::max<size_t>(bytes, 1)));
  CHECK(cudaMemset(out, 0xff, bytes));  // NaN everywhere: an element never written fails
  Launch l = prepare(s, dtype, kind, S, out, a, a_field, b, b_field);
  l.run(d_fs, d_is, d_err);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> got(bytes);
  CHECK(cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost));
  l.free();
  CHECK(cudaFree(out));
  return got;
}

static bool run_case(const Case& c, int dtype, uint64_t seed, const double* d_fs, long long* d_err) {
  const Shape& s = c.s;
  std::mt19937_64 rng(seed);
  const HostTensor x = random_tensor(s.x_numel(), dtype, c.x_off, rng);
  const HostTensor w = random_tensor(s.w_numel(), dtype, c.w_off, rng);
  const HostTensor dy = random_tensor(s.y_numel(), dtype, c.y_off, rng);
  void *dx_in = to_device(x.bytes), *dw_in = to_device(w.bytes), *ddy = to_device(dy.bytes);
  // Runtime int64 scalars: the offsets in slots 0 and 1 when the case asks for it.
  long long* d_is = nullptr;
  CHECK(cudaMalloc(&d_is, 2 * sizeof(long long)));
  auto field = [&](long long off, int slot) -> long long {
    if (!c.slot_offsets) return off;
    CHECK(cudaMemcpy(d_is + slot, &off, sizeof off, cudaMemcpyHostToDevice));
    return -(long long)slot - 1;
  };
  const double tol = tolerance(dtype);
  const int gw_dtype = dtype == F64 ? F64 : F32;
  bool ok = true;
  double e_fwd = 0, e_gi = 0, e_gw1 = 0, e_gw3 = 0;
  {
    const Reference r1 = reference(s, 1, x.v, w.v, dy.v);
    // fwd: a = x, b = w
    long long af = field(c.x_off, 0), bf = field(c.w_off, 1);
    std::vector<unsigned char> got =
        run_kernel(s, dtype, FWD, 1, dx_in, af, dw_in, bf, s.y_numel(), dtype, d_is, d_fs, d_err);
    if (!compare(got, dtype, r1.y, r1.y_abs, tol, e_fwd)) std::printf("    fwd wrong\n"), ok = false;
    // grad_input: a = dout, b = w
    af = field(c.y_off, 0), bf = field(c.w_off, 1);
    got = run_kernel(s, dtype, GRAD_INPUT, 1, ddy, af, dw_in, bf, s.x_numel(), dtype, d_is, d_fs, d_err);
    if (!compare(got, dtype, r1.dx, r1.dx_abs, tol, e_gi)) std::printf("    grad_input wrong\n"), ok = false;
    // grad_weight: a = x, b = dout, S = 1
    af = field(c.x_off, 0), bf = field(c.y_off, 1);
    got = run_kernel(s, dtype, GRAD_WEIGHT, 1, dx_in, af, ddy, bf, s.w_numel(), gw_dtype, d_is, d_fs, d_err);
    if (!compare(got, gw_dtype, r1.dw, r1.dw_abs, tol, e_gw1)) std::printf("    grad_weight S=1 wrong\n"), ok = false;
  }
  {
    const int S = 3;
    const Reference r3 = reference(s, S, x.v, w.v, dy.v);
    const long long af = field(c.x_off, 0), bf = field(c.y_off, 1);
    std::vector<unsigned char> got =
        run_kernel(s, dtype, GRAD_WEIGHT, S, dx_in, af, ddy, bf, S * s.w_numel(), gw_dtype, d_is, d_fs, d_err);
    if (!compare(got, gw_dtype, r3.dw, r3.dw_abs, tol, e_gw3)) std::printf("    grad_weight S=3 wrong\n"), ok = false;
  }
  std::printf("%s %-4s %s%s: err/sum|ab| fwd %.2e, grad_input %.2e, grad_weight S=1 %.2e, S=3 %.2e (tol %.0e)\n",
              ok ? "PASS" : "FAIL", dtype_name(dtype), describe(s).c_str(), c.slot_offsets ? " (offsets as scalars)" : "",
              e_fwd, e_gi, e_gw1, e_gw3, tol);
  CHECK(cudaFree(dx_in));
  CHECK(cudaFree(dw_in));
  CHECK(cudaFree(ddy));
  CHECK(cudaFree(d_is));
  return ok;
}

// ---------------------------------------------------------------------------
// Timing: bfloat16, ResNet-18 CIFAR shapes at batch 128, with a spot check
// of a few hundred outputs of each kernel against the host.

static double spot_check(const Shape& s, int kind, int S, const std::vector<double>& x, const std::vector<double>& w,
                         const std::vector<double>& dy, const std::vector<unsigned char>& got, int out_dtype,
                         std::mt19937_64& rng) {
  const int OH = s.OH(), OW = s.OW(), Cg = s.C / s.G, Og = s.O / s.G;
  double worst = 0;
  const size_t es = dtype_size(out_dtype);
  const long long numel = kind == FWD ? s.y_numel() : kind == GRAD_INPUT ? s.x_numel() : S * s.w_numel();
  for (int t = 0; t < 300; ++t) {
    const long long i = (long long)(rng() % (unsigned long long)numel);
    double ref = 0, abs = 0;
    if (kind == FWD) {
      const int ow = int(i % OW), oh = int(i / OW % OH), o = int(i / OW / OH % s.O), n = int(i / OW / OH / s.O);
      const int g = o / Og;
      for (int c = 0; c < Cg; ++c)
        for (int kh = 0; kh < s.KH; ++kh)
          for (int kw = 0; kw < s.KW; ++kw) {
            const int ih = oh * s.sH - s.pH + kh * s.dH, iw = ow * s.sW - s.pW + kw * s.dW;
            if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
            const double p = x[(((long long)n * s.C + g * Cg + c) * s.H + ih) * s.W + iw] *
                             w[(((long long)o * Cg + c) * s.KH + kh) * s.KW + kw];
            ref += p, abs += std::fabs(p);
          }
    } else if (kind == GRAD_INPUT) {
      const int iw = int(i % s.W), ih = int(i / s.W % s.H), ci = int(i / s.W / s.H % s.C), n = int(i / s.W / s.H / s.C);
      const int g = ci / Cg, c = ci % Cg;
      for (int o = g * Og; o < (g + 1) * Og; ++o)
        for (int kh = 0; kh < s.KH; ++kh)
          for (int kw = 0; kw < s.KW; ++kw) {
            const int th = ih + s.pH - kh * s.dH, tw = iw + s.pW - kw * s.dW;
            if (th < 0 || tw < 0 || th % s.sH || tw % s.sW || th / s.sH >= OH || tw / s.sW >= OW) continue;
            const double p = dy[(((long long)n * s.O + o) * OH + th / s.sH) * OW + tw / s.sW] *
                             w[(((long long)o * Cg + c) * s.KH + kh) * s.KW + kw];
            ref += p, abs += std::fabs(p);
          }
    } else {
      const long long wi = i % s.w_numel();
      const int sp = int(i / s.w_numel());
      const int kw = int(wi % s.KW), kh = int(wi / s.KW % s.KH);
      const int c = int(wi / s.KW / s.KH % Cg), o = int(wi / s.KW / s.KH / Cg);
      const int g = o / Og;
      for (long long n = (long long)sp * s.N / S; n < (long long)(sp + 1) * s.N / S; ++n)
        for (int oh = 0; oh < OH; ++oh)
          for (int ow = 0; ow < OW; ++ow) {
            const int ih = oh * s.sH - s.pH + kh * s.dH, iw = ow * s.sW - s.pW + kw * s.dW;
            if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
            const double p = dy[((n * s.O + o) * OH + oh) * OW + ow] * x[((n * s.C + g * Cg + c) * s.H + ih) * s.W + iw];
            ref += p, abs += std::fabs(p);
          }
    }
    const double v = read_value(got.data() + i * es, out_dtype), d = std::fabs(v - ref);
    if (!(d <= 1e-2 * abs)) return INFINITY;
    if (abs > 0) worst = std::max(worst, d / abs);
  }
  return worst;
}

static bool time_shapes(int sms) {
  const Shape shapes[] = {
      {128, 3, 32, 32, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1},    {128, 64, 32, 32, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1},
      {128, 64, 32, 32, 128, 3, 3, 2, 2, 1, 1, 1, 1, 1},  {128, 64, 32, 32, 128, 1, 1, 2, 2, 0, 0, 1, 1, 1},
      {128, 128, 16, 16, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1}, {128, 128, 16, 16, 256, 3, 3, 2, 2, 1, 1, 1, 1, 1},
      {128, 128, 16, 16, 256, 1, 1, 2, 2, 0, 0, 1, 1, 1}, {128, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1},
      {128, 256, 8, 8, 512, 3, 3, 2, 2, 1, 1, 1, 1, 1},   {128, 256, 8, 8, 512, 1, 1, 2, 2, 0, 0, 1, 1, 1},
      {128, 512, 4, 4, 512, 3, 3, 1, 1, 1, 1, 1, 1, 1},
  };
  const int iters = 20, warmup = 3;
  std::mt19937_64 rng(1234);
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  double* d_fs = nullptr;
  long long *d_is = nullptr, *d_err = nullptr;
  CHECK(cudaMalloc(&d_fs, sizeof(double)));
  CHECK(cudaMalloc(&d_is, sizeof(long long)));
  CHECK(cudaMalloc(&d_err, 2 * sizeof(long long)));
  bool ok = true;
  std::printf("\nbf16 timing, %d iterations after %d warm-up (TFLOP/s = 2 N O OH OW C/G KH KW / time)\n", iters, warmup);
  for (const Shape& s : shapes) {
    const HostTensor x = random_tensor(s.x_numel(), BF16, 0, rng), w = random_tensor(s.w_numel(), BF16, 0, rng),
                     dy = random_tensor(s.y_numel(), BF16, 0, rng);
    void *dxi = to_device(x.bytes), *dwi = to_device(w.bytes), *ddy = to_device(dy.bytes);
    std::printf("%s\n", describe(s).c_str());
    for (int kind = FWD; kind <= GRAD_WEIGHT; ++kind) {
      int S = 1;
      long long M, cols;
      gemm_dims(s, kind, 1, M, cols);
      if (kind == GRAD_WEIGHT) {
        // As the API chooses (api/src/nn/conv.cpp weight_splits): two blocks an SM.
        const long long tiles = ((M + cm::kTileM - 1) / cm::kTileM) * ((cols + cm::kTileN - 1) / cm::kTileN) * s.G;
        S = int(cm::weight_splits(s.N, std::min<long long>(s.N, 65535 / s.G), tiles, (long long)s.OH() * s.OW(),
                                  4.0 * s.w_numel(), 2LL * sms));
      }
      const int out_dtype = kind == GRAD_WEIGHT ? F32 : BF16;
      const long long out_numel = kind == FWD ? s.y_numel() : kind == GRAD_INPUT ? s.x_numel() : S * s.w_numel();
      const size_t bytes = out_numel * dtype_size(out_dtype);
      void* out = nullptr;
      CHECK(cudaMalloc(&out, bytes));
      CHECK(cudaMemset(out, 0xff, bytes));
      void* a = kind == GRAD_INPUT ? ddy : dxi;
      void* b = kind == GRAD_WEIGHT ? ddy : dwi;
      Launch l = prepare(s, BF16, kind, S, out, a, 0, b, 0);
      for (int i = 0; i < warmup; ++i) l.run(d_fs, d_is, d_err);
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(e0));
      for (int i = 0; i < iters; ++i) l.run(d_fs, d_is, d_err);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      CHECK(cudaGetLastError());
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      ms /= iters;
      std::vector<unsigned char> got(bytes);
      CHECK(cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost));
      const double err = spot_check(s, kind, S, x.v, w.v, dy.v, got, out_dtype, rng);
      const bool good = err <= 1e-2;
      ok = ok && good;
      char extra[32] = "";
      if (kind == GRAD_WEIGHT) std::snprintf(extra, sizeof extra, " S=%d", S);
      std::printf("  %-11s grid %5ux%ux%-3u%-6s %8.4f ms %7.1f TFLOP/s   spot check %s (%.1e)\n", kind_name(kind),
                  l.grid.x, l.grid.y, l.grid.z, extra, ms, s.flops() / (ms * 1e-3) / 1e12, good ? "ok" : "FAILED", err);
      l.free();
      CHECK(cudaFree(out));
    }
    CHECK(cudaFree(dxi));
    CHECK(cudaFree(dwi));
    CHECK(cudaFree(ddy));
  }
  CHECK(cudaFree(d_fs));
  CHECK(cudaFree(d_is));
  CHECK(cudaFree(d_err));
  return ok;
}

int main(int argc, char** argv) {
  bool timing = true;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--quick")) timing = false;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  for (int d = 0; d < 4; ++d)
    for (int k = 0; k < 3; ++k) {
      cudaFuncAttributes at;
      CHECK(cudaFuncGetAttributes(&at, kEntries[d][k]));
      std::printf("loom_conv2d_%s_%s: %d registers, %zu bytes static shared, %zu bytes local\n", kind_name(k),
                  dtype_name(d), at.numRegs, at.sharedSizeBytes, at.localSizeBytes);
    }

  //  N  C   H   W   O  KH KW sH sW pH pW dH dW G
  const Case cases[] = {
      // N, C, H, W, O, KH, KW, sH, sW, pH, pW, dH, dW, G; offsets of x, w, dout; offsets as runtime scalars
      {{2, 3, 7, 7, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 0, false},
      {{1, 4, 9, 11, 6, 3, 3, 2, 2, 0, 0, 1, 1, 1}, 1, 3, 5, false},
      {{3, 8, 10, 9, 16, 3, 3, 2, 2, 1, 1, 1, 1, 2}, 0, 0, 0, false},
      {{2, 6, 8, 8, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6}, 0, 0, 0, false},      // depthwise
      {{2, 8, 9, 9, 16, 3, 3, 2, 2, 1, 1, 1, 1, 8}, 0, 0, 0, false},     // depthwise, multiplier 2, stride 2
      {{2, 5, 13, 7, 7, 1, 1, 1, 1, 0, 0, 1, 1, 1}, 0, 0, 0, false},     // 1x1
      {{2, 16, 8, 8, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1}, 0, 0, 0, false},    // 1x1 stride 2 (weights in 16-byte chunks)
      {{1, 3, 11, 10, 4, 5, 3, 2, 1, 2, 1, 1, 1, 1}, 0, 0, 0, false},    // 5x3
      {{2, 4, 12, 12, 8, 3, 3, 1, 1, 2, 2, 2, 2, 1}, 0, 0, 0, false},    // dilation 2
      {{3, 7, 9, 9, 9, 3, 3, 1, 2, 2, 0, 2, 1, 1}, 0, 0, 0, false},      // mixed stride / pad / dilation
      {{2, 8, 11, 13, 12, 3, 3, 2, 2, 2, 2, 2, 2, 4}, 0, 0, 0, false},   // groups, stride 2, dilation 2
      {{1, 3, 10, 10, 5, 3, 3, 3, 3, 1, 1, 1, 1, 1}, 0, 0, 0, false},    // stride 3: three phases
      {{2, 2, 2, 3, 3, 4, 2, 1, 1, 2, 2, 1, 1, 1}, 0, 0, 0, false},      // kernel larger than the input
      {{1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1}, 0, 0, 0, false},      // tiny
      {{2, 48, 17, 15, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 2, 5, 1, false},  // two column tiles, K = 432
      {{1, 130, 6, 5, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 0, false},   // K = 1170
      {{2, 64, 8, 8, 128, 3, 3, 2, 2, 1, 1, 1, 1, 1}, 0, 8, 0, false},   // weights in chunks, two column tiles
      {{2, 64, 8, 8, 72, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 0, 4, 0, false},    // K % 8 == 0, weights misaligned
      {{3, 16, 32, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 0, false},  // many row tiles
      {{2, 12, 7, 9, 10, 3, 3, 2, 1, 1, 0, 1, 2, 2}, 7, 3, 2, true},     // offsets as runtime scalars
      {{5, 4, 6, 6, 4, 2, 2, 2, 2, 0, 0, 1, 1, 1}, 0, 0, 0, false},      // N = 5: ragged splits
      {{2, 32, 9, 9, 32, 3, 3, 1, 1, 2, 2, 2, 2, 1}, 0, 0, 0, false},    // channel-blocked k, dilation 2
      {{2, 64, 6, 7, 64, 3, 3, 2, 2, 1, 1, 1, 1, 2}, 0, 0, 0, false},    // channel-blocked k, groups, stride 2
      {{1, 96, 5, 5, 40, 3, 5, 1, 2, 1, 2, 1, 1, 1}, 0, 6, 0, false},    // blocked fwd (C/G = 96), 3x5
      {{2, 24, 6, 10, 100, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 0, false},  // weights in chunks, ragged column tile
      {{2, 8, 10, 11, 32, 3, 3, 3, 2, 1, 2, 2, 1, 1}, 0, 0, 0, false},   // grad_input by phases, strides 3, 2
      {{1, 4, 5, 1, 32, 3, 1, 2, 2, 1, 0, 1, 1, 1}, 0, 0, 0, false},     // grad_input by phases, W = 1 < stride
      {{3, 16, 9, 9, 64, 1, 1, 2, 2, 0, 0, 1, 1, 1}, 0, 0, 0, false},    // 1x1 stride 2: row blocks with no tap
      {{2, 128, 5, 6, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 0, false},   // grad_weight rows tap-major
      {{1, 256, 4, 5, 70, 3, 3, 2, 1, 1, 0, 1, 2, 2}, 0, 0, 0, false},   // the same, groups 2, odd sizes
      {{1, 3, 4, 4, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3}, 0, 0, 0, false},      // 1x1 with padding, depthwise
      // grad_weight 8 k at a time (unit stride along W, OW % 8 == 0): tap-major, the
      // input a column or three off its granules (x offset 1, 3), dilation,
      // stride 2 along H only, groups, a 1x1 kernel, rows that straddle a
      // granule at the tensor's ends; dout misaligned (offset 4): element by element
      {{2, 128, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 1, 0, 0, false},
      {{2, 16, 16, 16, 16, 3, 3, 1, 1, 2, 2, 2, 2, 1}, 3, 0, 0, false},
      {{2, 16, 9, 16, 24, 3, 3, 2, 1, 1, 1, 1, 1, 1}, 0, 0, 0, false},
      {{2, 32, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1, 2}, 5, 0, 0, false},
      {{2, 64, 8, 16, 32, 1, 1, 1, 1, 0, 0, 1, 1, 1}, 7, 0, 0, false},
      {{1, 5, 3, 6, 3, 3, 3, 1, 1, 1, 2, 1, 1, 1}, 1, 0, 0, false},
      {{2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 4, false},
  };

  double* d_fs = nullptr;
  long long* d_err = nullptr;
  CHECK(cudaMalloc(&d_fs, sizeof(double)));
  CHECK(cudaMalloc(&d_err, 2 * sizeof(long long)));
  int n = 0;
  bool ok = true;
  uint64_t seed = 1;
  for (const Case& c : cases)
    for (int d = 0; d < 4; ++d) {
      ok = run_case(c, d, seed++, d_fs, d_err) && ok;
      ++n;
    }
  CHECK(cudaFree(d_fs));
  CHECK(cudaFree(d_err));
  if (timing) ok = time_shapes(prop.multiProcessorCount) && ok;
  if (!ok) {
    std::printf("conv_check: FAILED\n");
    return 1;
  }
  std::printf("conv_check: all %d cases pass\n", n);
  return 0;
}
