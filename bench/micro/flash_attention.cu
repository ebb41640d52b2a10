// Fused attention (kernels/cuda/attention.cu: forward, backward preprocess, dK/dV, dQ) against a float64 host reference, then timed on [8,12,1024,64] causal. Not built by CMake. Build (from bench/micro): nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v -o /tmp/flash_attention flash_attention.cu; run: /tmp/flash_attention [--no-timing | --timing-only]
//
// NVRTC compiles attention.cu after kernels/cuda/bfloat16.cuh with no
// includes; nvcc's implicit cuda_runtime.h declares the same builtins, so
// including the two files in that order is all this needs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../kernels/cuda/bfloat16.cuh"
#define LOOM_ATTENTION_PLAIN_ENTRIES
#include "../../kernels/cuda/attention.cu"

#include "micro_host.h"

enum MaskKind { NONE = 0, CAUSAL = 1, WINDOW = 2 };
static const char* mask_name(int m) { return m == NONE ? "none" : m == CAUSAL ? "causal" : "window"; }
static bool host_visible(int mask, long long window, long long i, long long j) {
  if (mask == NONE) return true;
  if (mask == CAUSAL) return j <= i;
  return j <= i && j > i - window;
}

// A bf16 tensor [B,H,R,D] seen through element strides (batch, head, row),
// D contiguous, inside a buffer that may hold other tensors too.
struct View {
  long long off = 0, sb = 0, sh = 0, ss = 0;
  long long at(long long b, long long h, long long r, long long d) const { return off + b * sb + h * sh + r * ss + d; }
};

// ---------------------------------------------------------------------------
// Launches. D = 64 goes through the extern "C" entry points (what loom will
// call); other D through the generic template kernels.

template <class K>
static void smem_attr(K kernel, int bytes) {
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

struct Launch {
  int D, mask;
  long long window, BH;
  bool atomic_dq = false;  // backward with the float32 atomic dQ scheme
};

template <int D, class Mask, int WARPS = 8>
static void fwd_tmpl(const LoomAttnArgs& a, const Mask& m, long long BH) {
  typedef LoomAttnFwd<D, Mask, WARPS> F;
  auto k = loom_attention_fwd_kernel<D, Mask, WARPS>;
  smem_attr(k, F::SMEM_BYTES);
  k<<<dim3(unsigned(BH), unsigned((a.L + F::BM - 1) / F::BM)), F::THREADS, F::SMEM_BYTES>>>(a, m);
}
template <int D, class Mask>
static void bwd_tmpl(const LoomAttnArgs& a, const Mask& m, long long BH, bool atomic_dq) {
  const long long rows = BH * a.L, blocks = (rows * (D / 8) + 255) / 256;
  loom_attention_bwd_pre_kernel<D><<<unsigned(blocks), 256>>>(a, rows);
  if (atomic_dq) {
    typedef LoomAttnBwdKV<D, Mask, true> KV;
    auto k = loom_attention_bwd_dkdv_kernel<D, Mask, true>;
    smem_attr(k, KV::SMEM_BYTES);
    k<<<dim3(unsigned(BH), unsigned((a.S + KV::BN - 1) / KV::BN)), KV::THREADS, KV::SMEM_BYTES>>>(a, m);
    loom_attention_dq_convert_kernel<D><<<unsigned(blocks), 256>>>(a, rows);
  } else {
    typedef LoomAttnBwdKV<D, Mask, false> KV;
    typedef LoomAttnBwdQ<D, Mask> Q;
    auto k = loom_attention_bwd_dkdv_kernel<D, Mask, false>;
    smem_attr(k, KV::SMEM_BYTES);
    k<<<dim3(unsigned(BH), unsigned((a.S + KV::BN - 1) / KV::BN)), KV::THREADS, KV::SMEM_BYTES>>>(a, m);
    auto kq = loom_attention_bwd_dq_kernel<D, Mask>;
    smem_attr(kq, Q::SMEM_BYTES);
    kq<<<dim3(unsigned(BH), unsigned((a.L + Q::BM - 1) / Q::BM)), Q::THREADS, Q::SMEM_BYTES>>>(a, m);
  }
}

template <int D>
static void fwd_d(const LoomAttnArgs& a, const Launch& l) {
  if (l.mask == NONE) fwd_tmpl<D>(a, LoomAttnNoMask{}, l.BH);
  else if (l.mask == CAUSAL) fwd_tmpl<D>(a, LoomAttnCausal{}, l.BH);
  else fwd_tmpl<D>(a, LoomAttnWindow{l.window}, l.BH);
}
template <int D>
static void bwd_d(const LoomAttnArgs& a, const Launch& l) {
  if (l.mask == NONE) bwd_tmpl<D>(a, LoomAttnNoMask{}, l.BH, l.atomic_dq);
  else if (l.mask == CAUSAL) bwd_tmpl<D>(a, LoomAttnCausal{}, l.BH, l.atomic_dq);
  else bwd_tmpl<D>(a, LoomAttnWindow{l.window}, l.BH, l.atomic_dq);
}

typedef void (*FwdEntry)(const unsigned short*, const unsigned short*, const unsigned short*, unsigned short*, float*,
                         long long, long long, long long, long long, long long, long long, long long, long long,
                         long long, long long, long long, long long, long long, long long, int, float, long long);
typedef void (*BwdEntry)(const unsigned short*, const unsigned short*, const unsigned short*, const unsigned short*,
                         float*, float*, unsigned short*, unsigned short*, unsigned short*, long long, long long,
                         long long, long long, long long, long long, long long, long long, long long, long long,
                         long long, long long, long long, long long, long long, long long, long long, long long,
                         long long, long long, long long, long long, long long, int, float, long long);

static void run_fwd(const LoomAttnArgs& a, const Launch& l) {
  if (l.D == 64) {
    const FwdEntry e[3] = {loom_attention_fwd_d64_none, loom_attention_fwd_d64_causal, loom_attention_fwd_d64_window};
    typedef LoomAttnFwd<64, LoomAttnCausal> F;
    smem_attr(e[l.mask], F::SMEM_BYTES);
    e[l.mask]<<<dim3(unsigned(l.BH), unsigned((a.L + F::BM - 1) / F::BM)), F::THREADS, F::SMEM_BYTES>>>(
        a.q, a.k, a.v, a.o, a.lse, a.q_b, a.q_h, a.q_s, a.k_b, a.k_h, a.k_s, a.v_b, a.v_h, a.v_s, a.o_b, a.o_h, a.o_s,
        a.L, a.S, a.H, a.scale, l.window);
  } else if (l.D == 32) {
    fwd_d<32>(a, l);
  } else {
    fwd_d<128>(a, l);
  }
  CHECK(cudaGetLastError());
}

static void run_bwd(const LoomAttnArgs& a, const Launch& l) {
  if (l.D == 64 && !l.atomic_dq) {
    const long long rows = l.BH * a.L;
    loom_attention_bwd_pre_d64<<<unsigned((rows * 8 + 255) / 256), 256>>>(a.o, a.dout, a.delta, a.o_b, a.o_h, a.o_s,
                                                                          a.do_b, a.do_h, a.do_s, a.L, a.H, l.BH);
    const BwdEntry kv[3] = {loom_attention_bwd_dkdv_d64_none, loom_attention_bwd_dkdv_d64_causal,
                            loom_attention_bwd_dkdv_d64_window};
    const BwdEntry q[3] = {loom_attention_bwd_dq_d64_none, loom_attention_bwd_dq_d64_causal,
                           loom_attention_bwd_dq_d64_window};
    const int kv_smem = LoomAttnBwdKV<64, LoomAttnCausal>::SMEM_BYTES, q_smem = LoomAttnBwdQ<64, LoomAttnCausal>::SMEM_BYTES;
    smem_attr(kv[l.mask], kv_smem);
    smem_attr(q[l.mask], q_smem);
    kv[l.mask]<<<dim3(unsigned(l.BH), unsigned((a.S + 63) / 64)), 128, kv_smem>>>(
        a.q, a.k, a.v, a.dout, a.lse, a.delta, a.dq, a.dk, a.dv, a.q_b, a.q_h, a.q_s, a.k_b, a.k_h, a.k_s, a.v_b,
        a.v_h, a.v_s, a.do_b, a.do_h, a.do_s, a.dq_b, a.dq_h, a.dq_s, a.dk_b, a.dk_h, a.dk_s, a.dv_b, a.dv_h, a.dv_s,
        a.L, a.S, a.H, a.scale, l.window);
    q[l.mask]<<<dim3(unsigned(l.BH), unsigned((a.L + 63) / 64)), 128, q_smem>>>(
        a.q, a.k, a.v, a.dout, a.lse, a.delta, a.dq, a.dk, a.dv, a.q_b, a.q_h, a.q_s, a.k_b, a.k_h, a.k_s, a.v_b,
        a.v_h, a.v_s, a.do_b, a.do_h, a.do_s, a.dq_b, a.dq_h, a.dq_s, a.dk_b, a.dk_h, a.dk_s, a.dv_b, a.dv_h, a.dv_s,
        a.L, a.S, a.H, a.scale, l.window);
  } else if (l.D == 64) {
    bwd_d<64>(a, l);
  } else if (l.D == 32) {
    bwd_d<32>(a, l);
  } else {
    bwd_d<128>(a, l);
  }
  CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------------------
// A problem: host tensors (bf16 bits), device buffers, views.

struct Case {
  int B, H, L, S, D, mask;
  long long window;
  bool fused;  // q, k, v (and dq, dk, dv) as views of one [B, T, 3, H, D] buffer
};

struct Problem {
  Case c;
  View vq, vk, vv, vo, vdo, vdq, vdk, vdv;
  std::vector<uint16_t> in, dout;  // in: q, k, v (one buffer when fused); dout: [B,H,L,D] or [B,T,H,D]
  size_t in_n = 0, out_n = 0, grad_n = 0;
  uint16_t *d_in = nullptr, *d_o = nullptr, *d_do = nullptr, *d_grad = nullptr;
  float *d_lse = nullptr, *d_delta = nullptr, *d_acc = nullptr;
  LoomAttnArgs args{};
  Launch launch{};
};

static void make_views(Problem& p) {
  const Case& c = p.c;
  const long long B = c.B, H = c.H, L = c.L, S = c.S, D = c.D;
  if (c.fused) {  // [B, T, 3, H, D], T = L = S
    const long long T = L;
    auto part = [&](int w) {
      View v;
      v.off = w * H * D, v.sb = T * 3 * H * D, v.sh = D, v.ss = 3 * H * D;
      return v;
    };
    p.vq = part(0), p.vk = part(1), p.vv = part(2);
    p.in_n = size_t(B * T * 3 * H * D);
    p.vdq = part(0), p.vdk = part(1), p.vdv = part(2);
    p.grad_n = p.in_n;
    View o;  // [B, T, H, D]
    o.sb = T * H * D, o.sh = D, o.ss = H * D;
    p.vo = o, p.vdo = o;
    p.out_n = size_t(B * T * H * D);
  } else {  // q [B,H,L,D], then k, v [B,H,S,D] in one allocation
    View q, k, v;
    q.sb = H * L * D, q.sh = L * D, q.ss = D;
    k.off = B * H * L * D, k.sb = H * S * D, k.sh = S * D, k.ss = D;
    v = k, v.off = k.off + B * H * S * D;
    p.vq = q, p.vk = k, p.vv = v, p.vdq = q, p.vdk = k, p.vdv = v;
    p.in_n = p.grad_n = size_t(B * H * (L + 2 * S) * D);
    p.vo = q, p.vdo = q;
    p.out_n = size_t(B * H * L * D);
  }
}

static void setup(Problem& p, uint64_t seed) {
  make_views(p);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  p.in.assign(p.in_n, 0);
  p.dout.assign(p.out_n, 0);
  for (auto& x : p.in) x = float_to_bf16(nd(rng));
  for (auto& x : p.dout) x = float_to_bf16(nd(rng));
  const Case& c = p.c;
  const long long BH = (long long)c.B * c.H;
  CHECK(cudaMalloc(&p.d_in, p.in_n * 2));
  CHECK(cudaMalloc(&p.d_o, p.out_n * 2));
  CHECK(cudaMalloc(&p.d_do, p.out_n * 2));
  CHECK(cudaMalloc(&p.d_grad, p.grad_n * 2));
  CHECK(cudaMalloc(&p.d_lse, BH * c.L * 4));
  CHECK(cudaMalloc(&p.d_delta, BH * c.L * 4));
  CHECK(cudaMalloc(&p.d_acc, BH * c.L * c.D * 4));
  CHECK(cudaMemcpy(p.d_in, p.in.data(), p.in_n * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(p.d_do, p.dout.data(), p.out_n * 2, cudaMemcpyHostToDevice));
  // NaN bits, so that anything the kernels fail to write shows.
  CHECK(cudaMemset(p.d_o, 0xff, p.out_n * 2));
  CHECK(cudaMemset(p.d_grad, 0xff, p.grad_n * 2));
  CHECK(cudaMemset(p.d_lse, 0xff, BH * c.L * 4));
  LoomAttnArgs& a = p.args;
  a = LoomAttnArgs{};
  a.q = p.d_in + p.vq.off, a.k = p.d_in + p.vk.off, a.v = p.d_in + p.vv.off;
  a.o = p.d_o, a.dout = p.d_do;
  a.dq = p.d_grad + p.vdq.off, a.dk = p.d_grad + p.vdk.off, a.dv = p.d_grad + p.vdv.off;
  a.lse = p.d_lse, a.delta = p.d_delta;
  a.q_b = p.vq.sb, a.q_h = p.vq.sh, a.q_s = p.vq.ss, a.k_b = p.vk.sb, a.k_h = p.vk.sh, a.k_s = p.vk.ss;
  a.v_b = p.vv.sb, a.v_h = p.vv.sh, a.v_s = p.vv.ss, a.o_b = p.vo.sb, a.o_h = p.vo.sh, a.o_s = p.vo.ss;
  a.do_b = p.vdo.sb, a.do_h = p.vdo.sh, a.do_s = p.vdo.ss, a.dq_b = p.vdq.sb, a.dq_h = p.vdq.sh, a.dq_s = p.vdq.ss;
  a.dk_b = p.vdk.sb, a.dk_h = p.vdk.sh, a.dk_s = p.vdk.ss, a.dv_b = p.vdv.sb, a.dv_h = p.vdv.sh, a.dv_s = p.vdv.ss;
  a.L = c.L, a.S = c.S, a.H = c.H, a.scale = float(1.0 / std::sqrt(double(c.D)));
  p.launch = Launch{c.D, c.mask, c.window, BH, false};
}

static void release(Problem& p) {
  CHECK(cudaFree(p.d_in));
  CHECK(cudaFree(p.d_o));
  CHECK(cudaFree(p.d_do));
  CHECK(cudaFree(p.d_grad));
  CHECK(cudaFree(p.d_lse));
  CHECK(cudaFree(p.d_delta));
  CHECK(cudaFree(p.d_acc));
}

// ---------------------------------------------------------------------------
// float64 reference of one (b, h), from the same bf16 inputs.

struct Ref {
  std::vector<double> o, lse, dq, dk, dv;  // [L][D], [L], [L][D], [S][D], [S][D]
};

static void reference(const Problem& p, int b, int h, Ref& r) {
  const Case& c = p.c;
  const int L = c.L, S = c.S, D = c.D;
  const double scale = double(p.args.scale);
  auto in = [&](const View& v, int row, int d) { return double(bf16_to_float(p.in[v.at(b, h, row, d)])); };
  auto dout = [&](int row, int d) { return double(bf16_to_float(p.dout[p.vdo.at(b, h, row, d)])); };
  std::vector<double> P(size_t(L) * S), dP(size_t(L) * S);
  r.o.assign(size_t(L) * D, 0.0), r.lse.assign(L, 0.0), r.dq.assign(size_t(L) * D, 0.0);
  r.dk.assign(size_t(S) * D, 0.0), r.dv.assign(size_t(S) * D, 0.0);
  for (int i = 0; i < L; ++i) {
    double m = -INFINITY;
    for (int j = 0; j < S; ++j) {
      double s = -INFINITY;
      if (host_visible(c.mask, c.window, i, j)) {
        s = 0;
        for (int d = 0; d < D; ++d) s += in(p.vq, i, d) * in(p.vk, j, d);
        s *= scale;
      }
      P[size_t(i) * S + j] = s;
      m = std::max(m, s);
    }
    if (m == -INFINITY) {  // no visible key: zeros, LSE -inf
      for (int j = 0; j < S; ++j) P[size_t(i) * S + j] = 0;
      r.lse[i] = -INFINITY;
      continue;
    }
    double sum = 0;
    for (int j = 0; j < S; ++j) sum += P[size_t(i) * S + j] = std::exp(P[size_t(i) * S + j] - m);
    for (int j = 0; j < S; ++j) P[size_t(i) * S + j] /= sum;
    r.lse[i] = m + std::log(sum);
  }
  for (int i = 0; i < L; ++i)
    for (int j = 0; j < S; ++j) {
      const double pij = P[size_t(i) * S + j];
      double dp = 0;
      for (int d = 0; d < D; ++d) {
        if (pij != 0) r.o[size_t(i) * D + d] += pij * in(p.vv, j, d);
        dp += dout(i, d) * in(p.vv, j, d);
      }
      dP[size_t(i) * S + j] = dp;
    }
  for (int i = 0; i < L; ++i) {
    double delta = 0;
    for (int j = 0; j < S; ++j) delta += P[size_t(i) * S + j] * dP[size_t(i) * S + j];
    for (int j = 0; j < S; ++j) {
      const double pij = P[size_t(i) * S + j];
      if (pij == 0) continue;
      const double ds = pij * (dP[size_t(i) * S + j] - delta);
      for (int d = 0; d < D; ++d) {
        r.dv[size_t(j) * D + d] += pij * dout(i, d);
        r.dq[size_t(i) * D + d] += scale * ds * in(p.vk, j, d);
        r.dk[size_t(j) * D + d] += scale * ds * in(p.vq, i, d);
      }
    }
  }
}

// Largest |gpu - ref| and largest |ref| of one tensor over the checked heads.
struct Err {
  double err = 0, mag = 0;
  bool bad = false;  // a NaN, or an infinity where the reference has none
  void add(double g, double r) {
    if (std::isnan(g) || (std::isinf(g) != std::isinf(r)) || (std::isinf(r) && g != r)) {
      bad = true;
      return;
    }
    if (std::isinf(r)) return;
    err = std::max(err, std::fabs(g - r));
    mag = std::max(mag, std::fabs(r));
  }
  double rel() const { return mag > 0 ? err / mag : err; }
};

// Tolerances: out and the gradients relative to the tensor's largest |ref|
// (P and dS enter their products as bf16, and the results are stored as
// bf16: ~2^-9 each, summed over up to S terms of mixed sign); LSE absolute
// (float32 throughout from exact bf16 inputs).
static const double TOL_OUT = 1e-2, TOL_GRAD = 2e-2, TOL_LSE = 1e-3;

static bool check(Problem& p, const char* label, bool backward, const std::vector<std::pair<int, int>>& heads) {
  const Case& c = p.c;
  std::vector<uint16_t> o(p.out_n), g(p.grad_n);
  std::vector<float> lse(size_t(p.launch.BH) * c.L);
  CHECK(cudaMemcpy(o.data(), p.d_o, o.size() * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(lse.data(), p.d_lse, lse.size() * 4, cudaMemcpyDeviceToHost));
  if (backward) CHECK(cudaMemcpy(g.data(), p.d_grad, g.size() * 2, cudaMemcpyDeviceToHost));
  Err eo, el, eq, ek, ev;
  Ref r;
  for (auto [b, h] : heads) {
    reference(p, b, h, r);
    for (int i = 0; i < c.L; ++i) {
      el.add(lse[(size_t(b) * c.H + h) * c.L + i], r.lse[i]);
      for (int d = 0; d < c.D; ++d) {
        eo.add(bf16_to_float(o[p.vo.at(b, h, i, d)]), r.o[size_t(i) * c.D + d]);
        if (backward) eq.add(bf16_to_float(g[p.vdq.at(b, h, i, d)]), r.dq[size_t(i) * c.D + d]);
      }
    }
    if (backward)
      for (int j = 0; j < c.S; ++j)
        for (int d = 0; d < c.D; ++d) {
          ek.add(bf16_to_float(g[p.vdk.at(b, h, j, d)]), r.dk[size_t(j) * c.D + d]);
          ev.add(bf16_to_float(g[p.vdv.at(b, h, j, d)]), r.dv[size_t(j) * c.D + d]);
        }
  }
  bool ok = !eo.bad && !el.bad && eo.rel() <= TOL_OUT && el.err <= TOL_LSE;
  if (backward)
    ok = ok && !eq.bad && !ek.bad && !ev.bad && eq.rel() <= TOL_GRAD && ek.rel() <= TOL_GRAD &&
         ev.rel() <= TOL_GRAD;
  std::printf("%s %-52s out %.2e lse %.2e", ok ? "PASS" : "FAIL", label, eo.rel(), el.err);
  if (backward) std::printf(" dq %.2e dk %.2e dv %.2e", eq.rel(), ek.rel(), ev.rel());
  if (eo.bad || el.bad || eq.bad || ek.bad || ev.bad) std::printf(" (NaN or misplaced inf)");
  std::printf("\n");
  return ok;
}

static bool run_case(const Case& c, uint64_t seed) {
  Problem p;
  p.c = c;
  setup(p, seed);
  char label[160];
  std::snprintf(label, sizeof label, "B%d H%d L%d S%d D%d %s%s%s", c.B, c.H, c.L, c.S, c.D, mask_name(c.mask),
                c.mask == WINDOW ? ("(" + std::to_string(c.window) + ")").c_str() : "", c.fused ? " fused-qkv" : "");
  std::vector<std::pair<int, int>> heads;
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.H; ++h) heads.push_back({b, h});
  run_fwd(p.args, p.launch);
  run_bwd(p.args, p.launch);
  CHECK(cudaDeviceSynchronize());
  bool ok = check(p, label, true, heads);
  if (c.D == 64) {  // the atomic dQ scheme too (dk, dv come from its dK/dV kernel as well)
    CHECK(cudaMemset(p.d_grad, 0xff, p.grad_n * 2));
    p.args.dq_acc = p.d_acc;
    p.launch.atomic_dq = true;
    run_bwd(p.args, p.launch);
    CHECK(cudaDeviceSynchronize());
    std::snprintf(label + std::strlen(label), sizeof label - std::strlen(label), " [atomic dQ]");
    ok = check(p, label, true, heads) && ok;
  }
  release(p);
  return ok;
}

// ---------------------------------------------------------------------------
// Timing.

template <class F>
static double median_ms(F f, int reps = 20) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(e0));
    f();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

static bool timing() {
  bool ok = true;
  for (int mask : {CAUSAL, NONE}) {
    Case c{8, 12, 1024, 1024, 64, mask, 0, false};
    Problem p;
    p.c = c;
    setup(p, 7);
    const double T = c.L, fwd_flop = 4.0 * c.B * c.H * T * T * c.D / (mask == CAUSAL ? 2 : 1);
    std::printf("\n[%d,%d,%d,%d] bf16 %s, FLOP fwd %.3g, bwd 2.5x, fwd+bwd 3.5x\n", c.B, c.H, c.L, c.D,
                mask_name(mask), fwd_flop);
    auto show = [&](const char* what, double ms, double flop) {
      std::printf("  %-28s %8.4f ms %8.1f TFLOP/s\n", what, ms, flop / (ms * 1e-3) / 1e12);
    };
    const double f = median_ms([&] { run_fwd(p.args, p.launch); });
    show("forward", f, fwd_flop);
    const double f8 = median_ms([&] {
      if (mask == CAUSAL) fwd_tmpl<64, LoomAttnCausal, 4>(p.args, LoomAttnCausal{}, p.launch.BH);
      else fwd_tmpl<64, LoomAttnNoMask, 4>(p.args, LoomAttnNoMask{}, p.launch.BH);
    });
    show("forward (4 warps, 64 rows)", f8, fwd_flop);
    for (bool atomic : {false, true}) {
      p.launch.atomic_dq = atomic;
      p.args.dq_acc = atomic ? p.d_acc : nullptr;
      const double b = median_ms([&] { run_bwd(p.args, p.launch); });
      const double fb = median_ms([&] {
        run_fwd(p.args, p.launch);
        run_bwd(p.args, p.launch);
      });
      show(atomic ? "backward (atomic dQ)" : "backward (deterministic)", b, 2.5 * fwd_flop);
      show(atomic ? "fwd+bwd (atomic dQ)" : "fwd+bwd (deterministic)", fb, 3.5 * fwd_flop);
    }
    CHECK(cudaDeviceSynchronize());
    if (mask == CAUSAL) {  // the timed problem, spot-checked on its first and last heads
      p.launch.atomic_dq = false;
      p.args.dq_acc = nullptr;
      run_fwd(p.args, p.launch);
      run_bwd(p.args, p.launch);
      CHECK(cudaDeviceSynchronize());
      ok = check(p, "B8 H12 L1024 S1024 D64 causal (heads 0,0 and 7,11)", true, {{0, 0}, {7, 11}}) && ok;
    }
    release(p);
  }
  return ok;
}

int main(int argc, char** argv) {
  bool checks = true, times = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-timing")) times = false;
    else if (!std::strcmp(argv[i], "--timing-only")) checks = false;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("shared memory: fwd %d, dkdv %d (atomic %d), dq %d bytes\n", int(LoomAttnFwd<64, LoomAttnCausal>::SMEM_BYTES),
              int(LoomAttnBwdKV<64, LoomAttnCausal>::SMEM_BYTES), int(LoomAttnBwdKV<64, LoomAttnCausal, true>::SMEM_BYTES),
              int(LoomAttnBwdQ<64, LoomAttnCausal>::SMEM_BYTES));
  bool ok = true;
  if (checks) {
    std::printf("tolerances: out %.0e, dq/dk/dv %.0e (of max |ref|), lse %.0e absolute\n", TOL_OUT, TOL_GRAD, TOL_LSE);
    const Case cases[] = {
        {1, 1, 1, 1, 64, NONE, 0, false},        {1, 1, 1, 1, 64, CAUSAL, 0, false},
        {1, 1, 1, 1, 64, WINDOW, 1, false},      {2, 3, 77, 77, 64, NONE, 0, false},
        {2, 3, 77, 77, 64, CAUSAL, 0, false},    {2, 3, 77, 77, 64, WINDOW, 32, false},
        {1, 2, 130, 200, 64, NONE, 0, false},    {1, 2, 130, 200, 64, CAUSAL, 0, false},
        {1, 2, 200, 130, 64, CAUSAL, 0, false},  {2, 2, 256, 256, 64, NONE, 0, false},
        {2, 2, 256, 256, 64, CAUSAL, 0, false},  {2, 2, 256, 256, 64, WINDOW, 100, false},
        {1, 2, 200, 64, 64, WINDOW, 16, false},  // rows 79.. see no key: zeros, LSE -inf
        {2, 2, 100, 150, 32, NONE, 0, false},    {2, 2, 100, 150, 32, CAUSAL, 0, false},
        {2, 2, 100, 150, 128, NONE, 0, false},   {2, 2, 100, 150, 128, CAUSAL, 0, false},
        {1, 1, 300, 300, 128, WINDOW, 70, false}, {2, 3, 150, 150, 64, CAUSAL, 0, true},
        {2, 3, 150, 150, 64, NONE, 0, true},     {1, 2, 129, 129, 32, WINDOW, 40, true},
    };
    uint64_t seed = 1;
    for (const Case& c : cases) ok = run_case(c, seed++) && ok;
  }
  if (times) ok = timing() && ok;
  std::printf("\n%s\n", ok ? "ALL PASS" : "SOME FAILED");
  return ok ? 0 : 1;
}
