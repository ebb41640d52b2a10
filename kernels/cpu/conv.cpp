// Conv2d and its two gradients on the CPU (ir/conv.h has what each takes
// and gives). Each is a sum of small GEMMs over bands of output positions
// of one group:
//   forward      out[g] [Og, band]   = W_g [Og, K] . col [K, band]
//   grad input   dcol [K, band]      = W_g^T [K, Og] . dout[n,g] [Og, band], added back into dx (col2im)
//   grad weight  dw[t,g] [Og, K]    += dout[g] [Og, band] . col^T [band, K]   over the bands of split t
// with K = Cg * KH * KW. `col` is the input under each kernel position
// (im2col), built a band of 256 positions at a time in a task's own buffer
// (a band of the forward and the weight gradient may cross from one sample
// into the next), never for the whole tensor. The weights are packed once
// per call. Tasks are (group, band) for the forward, (sample, group) for the
// input gradient (its bands add into one sample's dx) and (split, group) for
// the weight gradient, so no two tasks write one element and the sums run
// in the same order at any thread count. Sums are float32 (float64 for
// float64); bfloat16 and float16 are widened into the task's buffers and
// rounded once. The product's register tile is compiled for AVX-512, AVX2
// and the baseline, picked once at run time.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ir/conv.h"
#include "ir/dtype_dispatch.h"
#include "kernels/cpu/library.h"

namespace loom::kernels::cpu {

namespace {

constexpr int64_t kBand = 256;  // output positions per im2col band
constexpr int64_t kKc = 256;    // terms of a sum per packed slice

// The product's register tile by instruction set, picked once: 8 rows of
// two 16-float AVX-512 vectors (16 of 32 registers), 6 rows of two 8-float
// AVX2 vectors (12 of 16), or a small tile for the baseline. (double: the
// same tiles, half as many lanes a vector.)
enum class Isa { Baseline, Avx2, Avx512 };
Isa isa() {
  static const Isa i = __builtin_cpu_supports("avx512f")                                   ? Isa::Avx512
                       : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? Isa::Avx2
                                                                                           : Isa::Baseline;
  return i;
}
// Rows x columns of each ISA's register tile: what pack() lays a's panels
// out for and what product() instantiates, so the two cannot disagree.
struct TileShape {
  int mr, nr;
};
constexpr TileShape kAvx512Tile{8, 32}, kAvx2Tile{6, 16}, kBaselineTile{4, 8};
int tile_rows() { return isa() == Isa::Avx512 ? kAvx512Tile.mr : isa() == Isa::Avx2 ? kAvx2Tile.mr : kBaselineTile.mr; }

// The left operand of a product, a [m, k] at a(i, p) = a[i * rs + p * cs],
// packed once: for each slice of
// kKc terms, panels of `mr` rows stored [term][row] (zero rows past m), so
// the register tile reads one contiguous stream.
template <class A>
struct Packed {
  std::vector<A> data;
  int64_t m = 0, k = 0, mr = 0;
  int64_t panels() const { return (m + mr - 1) / mr; }
  const A* panel(int64_t p0, int64_t rp) const {
    return data.data() + p0 * panels() * mr + rp * std::min(kKc, k - p0) * mr;
  }
};
template <class A, class Src>
void pack(const Src* a, int64_t rs, int64_t cs, int64_t m, int64_t k, Packed<A>& out) {
  out.m = m, out.k = k, out.mr = tile_rows();
  out.data.resize(static_cast<size_t>(out.panels() * out.mr * std::max<int64_t>(k, 1)));
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    for (int64_t rp = 0; rp < out.panels(); ++rp) {
      A* dst = const_cast<A*>(out.panel(p0, rp));
      for (int64_t i = 0; i < out.mr; ++i) {
        const int64_t row = rp * out.mr + i;
        for (int64_t q = 0; q < kc; ++q) dst[q * out.mr + i] = row < m ? static_cast<A>(a[row * rs + (p0 + q) * cs]) : A(0);
      }
    }
  }
}

// The register tile: c[i, j] (+)= sum_p ap[p][i] bp[p][j] for i < MR,
// j < NR over kc terms, MR x NR sums held in registers. Always inlined, so
// each ISA's caller below compiles it with its own vectors. `rows` x `cols`
// of the tile are stored.
template <class A, int MR, int NR>
__attribute__((always_inline)) inline void micro_tile(const A* __restrict ap, const A* __restrict bp, int64_t kc,
                                                      A* __restrict c, int64_t ldc, int64_t rows, int64_t cols,
                                                      bool accumulate) {
  A acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = accumulate && i < rows && j < cols ? c[i * ldc + j] : A(0);
  for (int64_t p = 0; p < kc; ++p)
    for (int i = 0; i < MR; ++i) {
      const A av = ap[p * MR + i];
      for (int j = 0; j < NR; ++j) acc[i][j] += av * bp[p * NR + j];
    }
  if (rows == MR && cols == NR) {
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) c[i * ldc + j] = acc[i][j];
  } else {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) c[i * ldc + j] = acc[i][j];
  }
}

// c [m, n] (+)= a . b [k, n] with b(p, j) = b[p * brs + j * bcs] (T: the
// tensors' dtype, widened here), a packed. Per slice of terms and block of
// NR columns, b's [kc, NR] panel is copied contiguous (zero-padded at a
// ragged edge) and stays in L1 while every row panel of a passes over it.
template <class A, class T, int MR, int NR>
__attribute__((always_inline)) inline void product_tiles(const Packed<A>& a, const T* b, int64_t brs, int64_t bcs, int64_t n,
                                                         A* c, int64_t ldc, bool accumulate) {
  const int64_t m = a.m, k = a.k;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, A(0));
    return;
  }
  thread_local std::vector<A> b_panel;
  b_panel.resize(static_cast<size_t>(kKc * NR));
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    const bool acc = accumulate || p0 > 0;
    for (int64_t j = 0; j < n; j += NR) {
      const int64_t cols = std::min<int64_t>(NR, n - j);
      A* bp = b_panel.data();
      for (int64_t p = 0; p < kc; ++p) {
        const T* src = b + (p0 + p) * brs + j * bcs;
        for (int64_t q = 0; q < cols; ++q) bp[p * NR + q] = static_cast<A>(src[q * bcs]);
        for (int64_t q = cols; q < NR; ++q) bp[p * NR + q] = A(0);
      }
      for (int64_t rp = 0; rp < a.panels(); ++rp)
        micro_tile<A, MR, NR>(a.panel(p0, rp), bp, kc, c + rp * MR * ldc + j, ldc, std::min<int64_t>(MR, m - rp * MR), cols,
                              acc);
    }
  }
}

template <class A, class T>
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void product_avx512(const Packed<A>& a, const T* b, int64_t brs,
                                                                          int64_t bcs, int64_t n, A* c, int64_t ldc,
                                                                          bool accumulate) {
  product_tiles<A, T, kAvx512Tile.mr, kAvx512Tile.nr>(a, b, brs, bcs, n, c, ldc, accumulate);
}
template <class A, class T>
__attribute__((target("avx2,fma"))) void product_avx2(const Packed<A>& a, const T* b, int64_t brs, int64_t bcs, int64_t n,
                                                      A* c, int64_t ldc, bool accumulate) {
  product_tiles<A, T, kAvx2Tile.mr, kAvx2Tile.nr>(a, b, brs, bcs, n, c, ldc, accumulate);
}
template <class A, class T>
void product(const Packed<A>& a, const T* b, int64_t brs, int64_t bcs, int64_t n, A* c, int64_t ldc, bool accumulate) {
  switch (isa()) {
    case Isa::Avx512: return product_avx512(a, b, brs, bcs, n, c, ldc, accumulate);
    case Isa::Avx2: return product_avx2(a, b, brs, bcs, n, c, ldc, accumulate);
    case Isa::Baseline: return product_tiles<A, T, kBaselineTile.mr, kBaselineTile.nr>(a, b, brs, bcs, n, c, ldc, accumulate);
  }
}

// col[k, l - l0] for k = (c, r, s) of group grp's channels and positions
// l in [l0, l1) of the batch's N * OH * OW output positions (a band may
// cross from one sample into the next): the input under each kernel
// position, zero in the padding.
template <class T, class A>
void im2col(const T* x, const ir::ConvGeometry& g, int64_t grp, int64_t l0, int64_t l1, std::vector<A>& col) {
  const int64_t k_len = g.cg() * g.kh * g.kw, band = l1 - l0, l_len = g.oh * g.ow;
  col.resize(static_cast<size_t>(k_len * band));
  for (int64_t ch = 0; ch < g.cg(); ++ch)
    for (int64_t r = 0; r < g.kh; ++r)
      for (int64_t s = 0; s < g.kw; ++s) {
        const int64_t k = (ch * g.kh + r) * g.kw + s, shift = s * g.dil_w - g.pad_w;
        // One output row (sample n, row i, columns [j0, j1)) at a time.
        for (int64_t l = 0; l < band;) {
          const int64_t at = l0 + l, n = at / l_len, i = at % l_len / g.ow, j0 = at % g.ow;
          const int64_t j1 = std::min(g.ow, j0 + band - l), h = i * g.stride_h - g.pad_h + r * g.dil_h;
          const bool row_in = h >= 0 && h < g.h;
          const T* src = x + ((n * g.c + grp * g.cg() + ch) * g.h + (row_in ? h : 0)) * g.w;
          for (int64_t j = j0; j < j1; ++j, ++l) {
            const int64_t v = j * g.stride_w + shift;
            const A value = row_in && v >= 0 && v < g.w ? static_cast<A>(src[v]) : A(0);
            col[static_cast<size_t>(k * band + l)] = value;
          }
        }
      }
}

// One sample's dx planes of a group += dcol [K, band], for its output
// positions [l0, l1) (within the sample).
template <class A>
void col2im(const std::vector<A>& dcol, const ir::ConvGeometry& g, int64_t l0, int64_t l1, A* dx_group) {
  const int64_t band = l1 - l0;
  for (int64_t ch = 0; ch < g.cg(); ++ch)
    for (int64_t r = 0; r < g.kh; ++r)
      for (int64_t s = 0; s < g.kw; ++s) {
        const A* src = dcol.data() + ((ch * g.kh + r) * g.kw + s) * band;
        A* plane = dx_group + ch * g.h * g.w;
        const int64_t shift = s * g.dil_w - g.pad_w;
        for (int64_t l = 0; l < band;) {
          const int64_t i = (l0 + l) / g.ow, j0 = (l0 + l) % g.ow, j1 = std::min(g.ow, j0 + band - l);
          const int64_t h = i * g.stride_h - g.pad_h + r * g.dil_h;
          if (h < 0 || h >= g.h) {
            l += j1 - j0;
            continue;
          }
          A* row = plane + h * g.w;
          for (int64_t j = j0; j < j1; ++j, ++l) {
            const int64_t v = j * g.stride_w + shift;
            if (v >= 0 && v < g.w) row[v] += src[l];
          }
        }
      }
}

template <class T, class A>
void forward(const T* x, const T* w, T* out, const ir::ConvGeometry& g) {
  const int64_t k_len = g.cg() * g.kh * g.kw, l_len = g.oh * g.ow, bands = (g.n * l_len + kBand - 1) / kBand;
  std::vector<Packed<A>> wp(static_cast<size_t>(g.groups));  // W_g [Og, K], packed once for every task
  for (int64_t grp = 0; grp < g.groups; ++grp) pack(w + grp * g.og() * k_len, k_len, 1, g.og(), k_len, wp[grp]);
  tbb::parallel_for(int64_t(0), g.groups * bands, [&](int64_t task) {
    const int64_t band = task % bands, grp = task / bands;
    const int64_t l0 = band * kBand, l1 = std::min(g.n * l_len, l0 + kBand), width = l1 - l0;
    // A task's buffers live on its thread and keep their pages from call
    // to call (a fresh large vector is a fresh mapping, zeroed by the kernel).
    thread_local std::vector<A> col, y;
    y.resize(static_cast<size_t>(g.og() * width));
    im2col<T, A>(x, g, grp, l0, l1, col);
    product(wp[grp], col.data(), width, 1, width, y.data(), width, false);
    for (int64_t o = 0; o < g.og(); ++o)
      for (int64_t l = l0; l < l1; ++l)
        out[(l / l_len * g.o + grp * g.og() + o) * l_len + l % l_len] = static_cast<T>(y[static_cast<size_t>(o * width + l - l0)]);
  });
}

template <class T, class A>
void grad_input(const T* dout, const T* w, T* dx, const ir::ConvGeometry& g) {
  const int64_t k_len = g.cg() * g.kh * g.kw, l_len = g.oh * g.ow, plane = g.cg() * g.h * g.w;
  // W_g^T [K, Og] per group (read across w's rows), packed once.
  std::vector<Packed<A>> wtp(static_cast<size_t>(g.groups));
  for (int64_t grp = 0; grp < g.groups; ++grp) pack(w + grp * g.og() * k_len, 1, k_len, k_len, g.og(), wtp[grp]);
  // One task a (sample, group): every band adds into the same dx planes.
  tbb::parallel_for(int64_t(0), g.n * g.groups, [&](int64_t task) {
    const int64_t grp = task % g.groups, n = task / g.groups;
    thread_local std::vector<A> acc, dcol;
    acc.assign(static_cast<size_t>(plane), A(0));
    const T* d = dout + (n * g.o + grp * g.og()) * l_len;  // [Og, L]
    for (int64_t l0 = 0; l0 < l_len; l0 += kBand) {
      const int64_t l1 = std::min(l_len, l0 + kBand), band = l1 - l0;
      dcol.resize(static_cast<size_t>(k_len * band));
      product(wtp[grp], d + l0, l_len, 1, band, dcol.data(), band, false);
      col2im(dcol, g, l0, l1, acc.data());
    }
    T* dst = dx + (n * g.c + grp * g.cg()) * g.h * g.w;
    for (int64_t e = 0; e < plane; ++e) dst[e] = static_cast<T>(acc[static_cast<size_t>(e)]);
  });
}

template <class T, class A>
void grad_weight(const T* x, const T* dout, A* dw, const ir::ConvGeometry& g) {
  const int64_t k_len = g.cg() * g.kh * g.kw, l_len = g.oh * g.ow;
  tbb::parallel_for(int64_t(0), g.splits * g.groups, [&](int64_t task) {
    const int64_t grp = task % g.groups, t = task / g.groups;
    A* dst = dw + (t * g.o + grp * g.og()) * k_len;
    std::fill(dst, dst + g.og() * k_len, A(0));
    thread_local std::vector<A> col;
    thread_local Packed<A> dp;
    // dw_g [Og, K] += dout [Og, band] . col^T [band, K] over the split's
    // output positions, in bands that may cross samples.
    const int64_t end = g.split_begin(t + 1) * l_len;
    for (int64_t l0 = g.split_begin(t) * l_len; l0 < end; l0 += kBand) {
      const int64_t l1 = std::min(end, l0 + kBand), band = l1 - l0;
      im2col<T, A>(x, g, grp, l0, l1, col);
      if (l0 / l_len == (l1 - 1) / l_len) {  // one sample: dout's rows are [Og, L] with a stride
        pack(dout + (l0 / l_len * g.o + grp * g.og()) * l_len + l0 % l_len, l_len, 1, g.og(), band, dp);
      } else {
        thread_local std::vector<A> d;
        d.resize(static_cast<size_t>(g.og() * band));
        for (int64_t o = 0; o < g.og(); ++o)
          for (int64_t l = l0; l < l1; ++l)
            d[static_cast<size_t>(o * band + l - l0)] = static_cast<A>(dout[(l / l_len * g.o + grp * g.og() + o) * l_len + l % l_len]);
        pack(d.data(), band, 1, g.og(), band, dp);
      }
      product(dp, col.data(), 1, band, k_len, dst, k_len, true);
    }
  });
}

}  // namespace

void conv(const ir::LibraryCall& call, std::span<const View> inputs, const View& out) {
  if (inputs.size() != 2) throw LibraryError{std::string(ir::op_name(call.op)) + " takes 2 inputs"};
  ir::ConvGeometry g;
  const std::string why = ir::conv_geometry(call.op, inputs[0].shape, inputs[1].shape, out.shape, call.attr, &g);
  if (!why.empty()) throw LibraryError{std::string(ir::op_name(call.op)) + " " + why};
  if (out.shape.numel() == 0) return;
  ir::dispatch_dtype(inputs[0].dtype, [&]<class T>() {
    if constexpr (!std::is_floating_point_v<T> && !ir::is_reduced_float_v<T>) {
      throw LibraryError{std::string(ir::op_name(call.op)) + " needs floating-point inputs"};
    } else {
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const T* a = static_cast<const T*>(inputs[0].data);
      const T* b = static_cast<const T*>(inputs[1].data);
      switch (call.op) {
        case ir::Op::Conv2d: return forward<T, A>(a, b, static_cast<T*>(out.data), g);
        case ir::Op::Conv2dGradInput: return grad_input<T, A>(a, b, static_cast<T*>(out.data), g);
        case ir::Op::Conv2dGradWeight: return grad_weight<T, A>(a, b, static_cast<A*>(out.data), g);
        default: throw LibraryError{std::string("not a convolution: ") + ir::op_name(call.op)};
      }
    }
  });
}

}  // namespace loom::kernels::cpu
