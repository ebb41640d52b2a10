// Attention on the CPU, flash-style: each task takes one (batch*head, block
// of query rows) and walks the keys in blocks with an online softmax (a
// running max m and sum l per row; when a block raises the max, what was
// summed so far is scaled by exp(m_old - m_new)), so no [L, S] matrix is
// ever stored. Under the causal mask a query block stops at its last row's
// key. The gradients recompute each block's probabilities from the saved
// logsumexp: dq per query block, dk and dv per key block, so no task writes
// where another does and the sums run in the same order at any thread count.
// Statistics and sums are float32 (float64 for float64 inputs); bfloat16
// and float16 inputs are widened once per task. The semantics are the
// reference backend's (runtime/reference/eval_attention.cpp).
#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
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

template <class A>
A dot(const A* a, const A* b, int64_t n) {
  A s = 0;
  for (int64_t c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}

// The last key (exclusive) any of rows [i0, i1) can see.
int64_t key_end(ir::AttentionMask mask, int64_t i1, int64_t s) {
  return mask == ir::AttentionMask::Causal ? std::min(s, i1) : s;
}

// out [N,L,Dv], then lse [N,L].
template <class T, class A>
void forward(const T* q, const T* k, const T* v, A* out, const Dims3& g, A scale, ir::AttentionMask mask) {
  A* const lse_out = out + g.n * g.l * g.dv;
  const A neg_inf = -std::numeric_limits<A>::infinity();
  tbb::parallel_for(tbb::blocked_range2d<int64_t>(0, g.n, 1, 0, (g.l + kRows - 1) / kRows, 1), [&](const auto& r) {
    std::vector<A> qs, ks, vs, acc, m, l, p(static_cast<size_t>(kKeys));
    for (int64_t n = r.rows().begin(); n < r.rows().end(); ++n)
      for (int64_t blk = r.cols().begin(); blk < r.cols().end(); ++blk) {
        const int64_t i0 = blk * kRows, i1 = std::min(g.l, i0 + kRows), rows = i1 - i0;
        const int64_t s_end = key_end(mask, i1, g.s);
        widen(q + n * g.l * g.d, i0, i1, g.d, qs);
        widen(k + n * g.s * g.d, 0, s_end, g.d, ks);
        widen(v + n * g.s * g.dv, 0, s_end, g.dv, vs);
        acc.assign(static_cast<size_t>(rows * g.dv), A(0));
        m.assign(static_cast<size_t>(rows), neg_inf);
        l.assign(static_cast<size_t>(rows), A(0));
        for (int64_t j0 = 0; j0 < s_end; j0 += kKeys) {
          const int64_t j1 = std::min(s_end, j0 + kKeys);
          for (int64_t i = i0; i < i1; ++i) {
            const size_t ri = static_cast<size_t>(i - i0);
            const A* qi = &qs[ri * static_cast<size_t>(g.d)];
            A block_max = neg_inf;
            for (int64_t j = j0; j < j1; ++j) {
              A sc = ir::attention_visible(mask, i, j) ? dot(qi, &ks[static_cast<size_t>(j * g.d)], g.d) * scale : neg_inf;
              p[static_cast<size_t>(j - j0)] = sc;
              block_max = std::max(block_max, sc);
            }
            if (block_max == neg_inf) continue;  // nothing visible in this block
            const A m_new = std::max(m[ri], block_max);
            const A correction = std::exp(m[ri] - m_new);  // exp(-inf) = 0 on a row's first block
            A* a = &acc[ri * static_cast<size_t>(g.dv)];
            for (int64_t e = 0; e < g.dv; ++e) a[e] *= correction;
            A sum = 0;
            for (int64_t j = j0; j < j1; ++j) {
              const A pj = std::exp(p[static_cast<size_t>(j - j0)] - m_new);
              sum += pj;
              const A* vj = &vs[static_cast<size_t>(j * g.dv)];
              for (int64_t e = 0; e < g.dv; ++e) a[e] += pj * vj[e];
            }
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
// logsumexp and delta = rowsum(dout * out), both [N, L].
template <class T, class A>
void backward(const T* q, const T* k, const T* v, const T* dout, const A* lse_in, const A* delta_in, A* out,
              const Dims3& g, A scale, ir::AttentionMask mask, bool grad_q) {
  const int64_t rows_total = grad_q ? g.l : g.s;
  const int64_t width = grad_q ? g.d : g.d + g.dv;
  const A neg_inf = -std::numeric_limits<A>::infinity();
  tbb::parallel_for(tbb::blocked_range2d<int64_t>(0, g.n, 1, 0, (rows_total + kRows - 1) / kRows, 1), [&](const auto& r) {
    std::vector<A> qs, ks, vs, gos, lse, delta, grad;
    for (int64_t n = r.rows().begin(); n < r.rows().end(); ++n)
      for (int64_t blk = r.cols().begin(); blk < r.cols().end(); ++blk) {
        const int64_t b0 = blk * kRows, b1 = std::min(rows_total, b0 + kRows);
        // The query rows this task meets: its own block (dq), or every row
        // that can see one of its keys (dk, dv: under causal, rows >= b0).
        const int64_t i0 = grad_q ? b0 : (mask == ir::AttentionMask::Causal ? std::min(b0, g.l) : 0);
        const int64_t i1 = grad_q ? b1 : g.l;
        const int64_t j0 = grad_q ? 0 : b0, j1 = grad_q ? key_end(mask, b1, g.s) : b1;
        widen(q + n * g.l * g.d, i0, i1, g.d, qs);
        widen(dout + n * g.l * g.dv, i0, i1, g.dv, gos);
        widen(k + n * g.s * g.d, j0, j1, g.d, ks);
        widen(v + n * g.s * g.dv, j0, j1, g.dv, vs);
        lse.resize(static_cast<size_t>(i1 - i0));
        delta.resize(static_cast<size_t>(i1 - i0));
        for (int64_t i = i0; i < i1; ++i) {
          lse[static_cast<size_t>(i - i0)] = lse_in[n * g.l + i];
          delta[static_cast<size_t>(i - i0)] = delta_in[n * g.l + i];
        }
        grad.assign(static_cast<size_t>((b1 - b0) * width), A(0));
        for (int64_t i = i0; i < i1; ++i) {
          const size_t ri = static_cast<size_t>(i - i0);
          if (lse[ri] == neg_inf) continue;  // a row that saw no key
          const A* qi = &qs[ri * static_cast<size_t>(g.d)];
          const A* goi = &gos[ri * static_cast<size_t>(g.dv)];
          for (int64_t j = j0; j < j1; ++j) {
            if (!ir::attention_visible(mask, i, j)) continue;
            const size_t rj = static_cast<size_t>(j - j0);
            const A* kj = &ks[rj * static_cast<size_t>(g.d)];
            const A p = std::exp(dot(qi, kj, g.d) * scale - lse[ri]);
            const A ds = p * (dot(goi, &vs[rj * static_cast<size_t>(g.dv)], g.dv) - delta[ri]) * scale;
            if (grad_q) {
              A* dq = &grad[ri * static_cast<size_t>(width)];
              for (int64_t e = 0; e < g.d; ++e) dq[e] += ds * kj[e];
            } else {
              A* dkv = &grad[rj * static_cast<size_t>(width)];
              for (int64_t e = 0; e < g.d; ++e) dkv[e] += ds * qi[e];
              for (int64_t e = 0; e < g.dv; ++e) dkv[g.d + e] += p * goi[e];
            }
          }
        }
        std::copy(grad.begin(), grad.end(), out + (n * rows_total + b0) * width);
      }
  });
}

}  // namespace

void attention(const ir::LibraryCall& call, std::span<const View> in, const View& out, double scale) {
  if (in.size() < 3 || in[0].shape.n != 3 || in[1].shape.n != 3 || in[2].shape.n != 3)
    throw LibraryError{"attention expects 3-D q, k and v"};
  const Dims3 g{in[0].shape[0], in[0].shape[1], in[1].shape[1], in[0].shape[2], in[2].shape[2]};
  const auto mask = static_cast<ir::AttentionMask>(call.attr[0]);
  if (mask != ir::AttentionMask::None && mask != ir::AttentionMask::Causal) throw LibraryError{"attention: unknown mask kind"};
  if (call.op != ir::Op::Attention && in.size() != 6) throw LibraryError{"attention's gradients take 6 inputs"};
  if (out.shape.numel() == 0) return;
  ir::dispatch_dtype(in[0].dtype, [&]<class T>() {
    if constexpr (!std::is_floating_point_v<T> && !ir::is_reduced_float_v<T>) {
      throw LibraryError{"attention needs floating-point q, k and v"};
    } else {
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const T *q = static_cast<const T*>(in[0].data), *k = static_cast<const T*>(in[1].data),
              *v = static_cast<const T*>(in[2].data);
      A* o = static_cast<A*>(out.data);
      if (call.op == ir::Op::Attention) return forward<T, A>(q, k, v, o, g, static_cast<A>(scale), mask);
      backward<T, A>(q, k, v, static_cast<const T*>(in[3].data), static_cast<const A*>(in[4].data),
                     static_cast<const A*>(in[5].data), o, g, static_cast<A>(scale), mask, call.op == ir::Op::AttentionGradQ);
    }
  });
}

}  // namespace loom::kernels::cpu
