// Attention on the CPU, flash-style: each task takes one (batch*head, block
// of query rows) and walks the keys in blocks with an online softmax (a
// running max m and sum l per row; when a block raises the max, what was
// summed so far is scaled by exp(m_old - m_new)), so no [L, S] matrix is
// ever stored. Under the causal mask a query block stops at its last row's
// key; a mask tensor (ir::AttentionMaskPlanes) hides pairs besides. The
// gradients recompute each block's probabilities from the saved logsumexp:
// dq per query block, dk and dv per key block, so no task writes where
// another does and the sums run in the same order at any thread count.
// Statistics and sums are float32 (float64 for float64 inputs); bfloat16
// and float16 inputs are widened once per task. The semantics are the
// reference backend's (runtime/reference/eval_attention.cpp).
//
// The inner loops have no reductions: a block's keys are transposed once
// ([D, keys]), so a row's scores are D multiply-adds across 64 keys at a
// time, and value rows are added across D; the float32 forms are compiled
// for AVX-512, AVX2 and the baseline, picked at run time (target_clones).
#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "ir/dtype_dispatch.h"
#include "kernels/cpu/library.h"

namespace loom::kernels::cpu {

namespace {

constexpr int64_t kRows = 32;  // query rows (forward, dq) or keys (dk, dv) per task
constexpr int64_t kKeys = 64;  // keys (or queries) per inner block

struct Dims3 {
  int64_t n, l, s, d, dv;
};

// Rows [r0, r1) of a [rows, width] slab of T widened to A.
template <class A, class T>
void widen(const T* src, int64_t r0, int64_t r1, int64_t width, std::vector<A>& dst) {
  dst.resize(static_cast<size_t>((r1 - r0) * width));
  for (int64_t x = 0; x < (r1 - r0) * width; ++x) dst[static_cast<size_t>(x)] = static_cast<A>(src[r0 * width + x]);
}

// Rows [r0, r1) of a [rows, width] slab of A (already widened, rows from 0),
// transposed to [width, r1 - r0].
template <class A>
void transpose(const A* src, int64_t r0, int64_t r1, int64_t width, std::vector<A>& dst) {
  const int64_t n = r1 - r0;
  dst.resize(static_cast<size_t>(width * n));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t e = 0; e < width; ++e) dst[static_cast<size_t>(e * n + r)] = src[(r0 + r) * width + e];
}

// out[j] = sum_e x[e] * mt[e * n + j], j < n: x against n columns.
template <class A>
void dot_columns(const A* __restrict x, const A* __restrict mt, int64_t d, int64_t n, A* __restrict out) {
  for (int64_t j = 0; j < n; ++j) out[j] = 0;
  for (int64_t e = 0; e < d; ++e) {
    const A xe = x[e];
    const A* row = mt + e * n;
    for (int64_t j = 0; j < n; ++j) out[j] += xe * row[j];
  }
}
// acc[c] += sum_j w[j] * m[j * width + c]: rows of m weighted into acc.
template <class A>
void add_rows(const A* __restrict w, const A* __restrict m, int64_t n, int64_t width, A* __restrict acc) {
  for (int64_t j = 0; j < n; ++j) {
    const A wj = w[j];
    if (wj == 0) continue;
    const A* row = m + j * width;
    for (int64_t c = 0; c < width; ++c) acc[c] += wj * row[c];
  }
}
// out[j * width + c] += w[j] * x[c]: a rank-one update of n rows.
template <class A>
void add_outer(const A* __restrict w, const A* __restrict x, int64_t n, int64_t width, A* __restrict out) {
  for (int64_t j = 0; j < n; ++j) {
    const A wj = w[j];
    if (wj == 0) continue;
    A* row = out + j * width;
    for (int64_t c = 0; c < width; ++c) row[c] += wj * x[c];
  }
}

// x[j] = exp(x[j]) for a block, in float32: 2^round(x log2 e) times a
// degree-6 polynomial of the remainder (within 2 ulp of std::exp), 0 below
// -87.3 (so -inf, a masked score, gives exactly 0). Branch-free, so the
// block is vectorized where std::exp is a call per element.
inline float exp_f32(float x) {
  const float xc = std::min(std::max(x, -87.3f), 88.0f);
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  const float r = (xc - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, 4);
  return x < -87.3f ? 0.0f : p * two_n;
}

#define LOOM_ATTENTION_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
LOOM_ATTENTION_CLONES void exp_block_f32(float* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) x[j] = exp_f32(x[j]);
}
LOOM_ATTENTION_CLONES void dot_columns_f32(const float* x, const float* mt, int64_t d, int64_t n, float* out) {
  dot_columns(x, mt, d, n, out);
}
LOOM_ATTENTION_CLONES void add_rows_f32(const float* w, const float* m, int64_t n, int64_t width, float* acc) {
  add_rows(w, m, n, width, acc);
}
LOOM_ATTENTION_CLONES void add_outer_f32(const float* w, const float* x, int64_t n, int64_t width, float* out) {
  add_outer(w, x, n, width, out);
}
#undef LOOM_ATTENTION_CLONES
void exp_block_any(float* x, int64_t n) { exp_block_f32(x, n); }
void exp_block_any(double* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) x[j] = std::exp(x[j]);
}
void dot_columns_any(const float* x, const float* mt, int64_t d, int64_t n, float* out) { dot_columns_f32(x, mt, d, n, out); }
void dot_columns_any(const double* x, const double* mt, int64_t d, int64_t n, double* out) { dot_columns(x, mt, d, n, out); }
void add_rows_any(const float* w, const float* m, int64_t n, int64_t width, float* acc) { add_rows_f32(w, m, n, width, acc); }
void add_rows_any(const double* w, const double* m, int64_t n, int64_t width, double* acc) { add_rows(w, m, n, width, acc); }
void add_outer_any(const float* w, const float* x, int64_t n, int64_t width, float* out) { add_outer_f32(w, x, n, width, out); }
void add_outer_any(const double* w, const double* x, int64_t n, int64_t width, double* out) { add_outer(w, x, n, width, out); }


// out [N,L,Dv], then lse [N,L].
template <class T, class A>
void forward(const T* q, const T* k, const T* v, A* out, const Dims3& g, A scale, const ir::AttentionMaskCode& mask,
             const ir::AttentionMaskPlanes& planes) {
  A* const lse_out = out + g.n * g.l * g.dv;
  const A neg_inf = -std::numeric_limits<A>::infinity();
  tbb::parallel_for(tbb::blocked_range2d<int64_t>(0, g.n, 1, 0, (g.l + kRows - 1) / kRows, 1), [&](const auto& r) {
    std::vector<A> qs, ks, kt, vs, acc, m, l, p(static_cast<size_t>(kKeys));
    for (int64_t n = r.rows().begin(); n < r.rows().end(); ++n)
      for (int64_t blk = r.cols().begin(); blk < r.cols().end(); ++blk) {
        const uint8_t* plane = planes.plane(n);
        const int64_t i0 = blk * kRows, i1 = std::min(g.l, i0 + kRows), rows = i1 - i0;
        const int64_t s_begin = std::min(mask.key_begin(i0), g.s), s_end = mask.key_end(i1, g.s);
        widen(q + n * g.l * g.d, i0, i1, g.d, qs);
        widen(k + n * g.s * g.d, 0, s_end, g.d, ks);  // rows from 0, so a key's row is its index
        widen(v + n * g.s * g.dv, 0, s_end, g.dv, vs);
        acc.assign(static_cast<size_t>(rows * g.dv), A(0));
        m.assign(static_cast<size_t>(rows), neg_inf);
        l.assign(static_cast<size_t>(rows), A(0));
        for (int64_t j0 = s_begin / kKeys * kKeys; j0 < s_end; j0 += kKeys) {
          const int64_t j1 = std::min(s_end, j0 + kKeys), nk = j1 - j0;
          transpose(ks.data(), j0, j1, g.d, kt);
          for (int64_t i = i0; i < i1; ++i) {
            const size_t ri = static_cast<size_t>(i - i0);
            dot_columns_any(&qs[ri * static_cast<size_t>(g.d)], kt.data(), g.d, nk, p.data());
            A block_max = neg_inf;
            const uint8_t* seen = planes.row(plane, i);
            for (int64_t j = j0; j < j1; ++j) {
              A& sc = p[static_cast<size_t>(j - j0)];
              sc = mask.visible(i, j) && (!seen || seen[j]) ? sc * scale : neg_inf;
              block_max = std::max(block_max, sc);
            }
            if (block_max == neg_inf) continue;  // nothing visible in this block
            const A m_new = std::max(m[ri], block_max);
            const A correction = std::exp(m[ri] - m_new);  // exp(-inf) = 0 on a row's first block
            A* a = &acc[ri * static_cast<size_t>(g.dv)];
            for (int64_t e = 0; e < g.dv; ++e) a[e] *= correction;
            for (int64_t j = 0; j < nk; ++j) p[static_cast<size_t>(j)] -= m_new;
            exp_block_any(p.data(), nk);
            A sum = 0;
            for (int64_t j = 0; j < nk; ++j) sum += p[static_cast<size_t>(j)];
            add_rows_any(p.data(), &vs[static_cast<size_t>(j0 * g.dv)], nk, g.dv, a);
            l[ri] = l[ri] * correction + sum;
            m[ri] = m_new;
          }
        }
        for (int64_t i = i0; i < i1; ++i) {
          const size_t ri = static_cast<size_t>(i - i0);
          A* row = out + (n * g.l + i) * g.dv;
          const A inv = l[ri] > 0 ? A(1) / l[ri] : A(0);
          for (int64_t e = 0; e < g.dv; ++e) row[e] = acc[ri * static_cast<size_t>(g.dv) + static_cast<size_t>(e)] * inv;
          lse_out[n * g.l + i] = l[ri] > 0 ? m[ri] + std::log(l[ri]) : neg_inf;
        }
      }
  });
}

// dq (grad_q) or [dk | dv] for one task's rows, from the forward's
// logsumexp and delta = rowsum(dout * out), both [N, L]. Per query row and
// block of keys: s = q kᵀ and dp = dout vᵀ against the transposed block,
// p = exp(s * scale - lse), ds = p (dp - delta) scale; then dq += ds k, or
// dk += ds q and dv += p dout by rank-one updates of the block's rows.
template <class T, class A>
void backward(const T* q, const T* k, const T* v, const T* dout, const A* lse_in, const A* delta_in, A* out,
              const Dims3& g, A scale, const ir::AttentionMaskCode& mask, const ir::AttentionMaskPlanes& planes,
              bool grad_q) {
  const int64_t rows_total = grad_q ? g.l : g.s;
  const int64_t width = grad_q ? g.d : g.d + g.dv;
  const A neg_inf = -std::numeric_limits<A>::infinity();
  tbb::parallel_for(tbb::blocked_range2d<int64_t>(0, g.n, 1, 0, (rows_total + kRows - 1) / kRows, 1), [&](const auto& r) {
    std::vector<A> qs, ks, vs, kt, vt, gos, grad, dk, dv, s(static_cast<size_t>(kKeys)), dp(static_cast<size_t>(kKeys));
    for (int64_t n = r.rows().begin(); n < r.rows().end(); ++n)
      for (int64_t blk = r.cols().begin(); blk < r.cols().end(); ++blk) {
        const uint8_t* plane = planes.plane(n);
        const int64_t b0 = blk * kRows, b1 = std::min(rows_total, b0 + kRows);
        // The query rows this task meets: its own block (dq), or every row
        // that can see one of its keys (dk, dv: under causal, rows >= b0).
        const bool causal = mask.kind == ir::AttentionMask::Causal || mask.kind == ir::AttentionMask::SlidingWindow;
        const int64_t i0 = grad_q ? b0 : (causal ? std::min(b0, g.l) : 0);
        const int64_t i1 = grad_q ? b1 : (mask.kind == ir::AttentionMask::SlidingWindow ? std::min(g.l, b1 + mask.window - 1) : g.l);
        const int64_t j0 = grad_q ? std::min(mask.key_begin(b0), g.s) : b0;
        const int64_t j1 = grad_q ? std::max(j0, mask.key_end(b1, g.s)) : b1;
        widen(q + n * g.l * g.d, i0, i1, g.d, qs);
        widen(dout + n * g.l * g.dv, i0, i1, g.dv, gos);
        widen(k + n * g.s * g.d, j0, j1, g.d, ks);
        widen(v + n * g.s * g.dv, j0, j1, g.dv, vs);
        grad.assign(static_cast<size_t>((b1 - b0) * width), A(0));
        dk.assign(grad_q ? 0 : static_cast<size_t>((j1 - j0) * g.d), A(0));
        dv.assign(grad_q ? 0 : static_cast<size_t>((j1 - j0) * g.dv), A(0));
        for (int64_t c0 = j0; c0 < j1; c0 += kKeys) {
          const int64_t c1 = std::min(j1, c0 + kKeys), nk = c1 - c0;
          transpose(ks.data(), c0 - j0, c1 - j0, g.d, kt);
          transpose(vs.data(), c0 - j0, c1 - j0, g.dv, vt);
          for (int64_t i = i0; i < i1; ++i) {
            const size_t ri = static_cast<size_t>(i - i0);
            const A lse = lse_in[n * g.l + i], delta = delta_in[n * g.l + i];
            if (lse == neg_inf) continue;  // a row that saw no key
            const A* qi = &qs[ri * static_cast<size_t>(g.d)];
            const A* goi = &gos[ri * static_cast<size_t>(g.dv)];
            dot_columns_any(qi, kt.data(), g.d, nk, s.data());
            dot_columns_any(goi, vt.data(), g.dv, nk, dp.data());
            bool any = false;
            const uint8_t* seen = planes.row(plane, i);
            for (int64_t j = 0; j < nk; ++j) {
              const size_t x = static_cast<size_t>(j);
              const bool visible = mask.visible(i, c0 + j) && (!seen || seen[c0 + j]);
              s[x] = visible ? s[x] * scale - lse : neg_inf;
              any = any || visible;
            }
            if (!any) continue;
            exp_block_any(s.data(), nk);  // p
            for (int64_t j = 0; j < nk; ++j) dp[static_cast<size_t>(j)] = s[static_cast<size_t>(j)] * (dp[static_cast<size_t>(j)] - delta) * scale;  // ds
            if (grad_q) {
              add_rows_any(dp.data(), &ks[static_cast<size_t>((c0 - j0) * g.d)], nk, g.d,
                           &grad[ri * static_cast<size_t>(width)]);
            } else {
              add_outer_any(dp.data(), qi, nk, g.d, &dk[static_cast<size_t>((c0 - j0) * g.d)]);
              add_outer_any(s.data(), goi, nk, g.dv, &dv[static_cast<size_t>((c0 - j0) * g.dv)]);
            }
          }
        }
        if (!grad_q)
          for (int64_t j = 0; j < j1 - j0; ++j) {
            std::copy_n(&dk[static_cast<size_t>(j * g.d)], g.d, &grad[static_cast<size_t>(j * width)]);
            std::copy_n(&dv[static_cast<size_t>(j * g.dv)], g.dv, &grad[static_cast<size_t>(j * width + g.d)]);
          }
        std::copy(grad.begin(), grad.end(), out + (n * rows_total + b0) * width);
      }
  });
}

}  // namespace

void attention(const ir::LibraryCall& call, std::span<const View> in, const View& out, double scale, int64_t window) {
  if (in.size() < 3 || in[0].shape.n != 3 || in[1].shape.n != 3 || in[2].shape.n != 3)
    throw LibraryError{"attention expects 3-D q, k and v"};
  const Dims3 g{in[0].shape[0], in[0].shape[1], in[1].shape[1], in[0].shape[2], in[2].shape[2]};
  const ir::AttentionMaskCode mask{static_cast<ir::AttentionMask>(call.attr[0]), window};
  if (!mask.known()) throw LibraryError{"attention: unknown mask kind, or a sliding window under 1"};
  const bool masked = call.attr.n > ir::kAttentionMaskDivisorAttr && call.attr[ir::kAttentionMaskDivisorAttr] > 0;
  if (in.size() != ir::attention_mask_input(call.op == ir::Op::Attention) + (masked ? 1 : 0))
    throw LibraryError{"attention: wrong number of inputs for its mask"};
  ir::AttentionMaskPlanes planes;
  if (masked) {
    const View& p = in.back();
    if (p.dtype != ScalarType::Bool || p.shape.n != 3 || p.shape[0] < 1 || (p.shape[1] != 1 && p.shape[1] != g.l) ||
        p.shape[2] != g.s)
      throw LibraryError{"attention's mask must be bool [P, 1 or L, S]"};
    planes = {static_cast<const uint8_t*>(p.data), p.shape[0], p.shape[1], p.shape[2],
              call.attr[ir::kAttentionMaskDivisorAttr]};
  }
  if (out.shape.numel() == 0) return;
  ir::dispatch_dtype(in[0].dtype, [&]<class T>() {
    if constexpr (!std::is_floating_point_v<T> && !ir::is_reduced_float_v<T>) {
      throw LibraryError{"attention needs floating-point q, k and v"};
    } else {
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const T *q = static_cast<const T*>(in[0].data), *k = static_cast<const T*>(in[1].data),
              *v = static_cast<const T*>(in[2].data);
      A* o = static_cast<A*>(out.data);
      if (call.op == ir::Op::Attention) return forward<T, A>(q, k, v, o, g, static_cast<A>(scale), mask, planes);
      backward<T, A>(q, k, v, static_cast<const T*>(in[3].data), static_cast<const A*>(in[4].data),
                     static_cast<const A*>(in[5].data), o, g, static_cast<A>(scale), mask, planes,
                     call.op == ir::Op::AttentionGradQ);
    }
  });
}

}  // namespace loom::kernels::cpu
