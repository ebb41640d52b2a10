// Matrix product [B,M,K] x [B,K,N] -> [B,M,N] (or [M,K] x [K,N] -> [M,N]).
//
// Floating point: GotoBLAS-style blocking. A KC x NC panel of B is packed
// into NR-wide strips (a strip stays in L1 while it is used), an MC x KC
// block of A into MR-row panels (in L2), and a register-tiled micro-kernel
// computes MR x NR of C per pass over K. The micro-kernel is written with
// GCC vector types, compiled three times (AVX-512, AVX2+FMA, baseline SSE2)
// with per-function target attributes and picked at run time, because the
// library is built for generic x86-64 but must use the host's vector width.
// Integer and bool products are rare and exact in any order: plain
// row-times-matrix loops, split across cores by rows.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include "kernels/cpu/library.h"

// Vector types passed between always_inline helpers never cross an ABI
// boundary; silence GCC's note about their calling convention.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace loom::kernels::cpu {

namespace {

// [B,M,K] x [B,K,N], or [M,K] x [K,N] as one batch.
void dims(const View& a, const View& b, int64_t& B, int64_t& M, int64_t& K, int64_t& N) {
  const bool batched = a.shape.n == 3;
  B = batched ? a.shape[0] : 1;
  M = a.shape[a.shape.n - 2];
  K = a.shape[a.shape.n - 1];
  N = b.shape[b.shape.n - 1];
}

typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef double v8d __attribute__((vector_size(64)));
typedef double v4d __attribute__((vector_size(32)));
typedef double v2d __attribute__((vector_size(16)));

// Block sizes, in elements. KC x NR of B (the strip the micro-kernel
// streams) is 32 KiB for float at NR = 32; MC x KC of A is ~100 KiB (L2);
// NC bounds the packed B panel, shared by all threads (L2/L3).
constexpr int64_t KC = 256;
constexpr int64_t MC = 96;
constexpr int64_t NC = 2048;

template <class T>
struct Aligned {
  std::unique_ptr<T[], void (*)(T*)> p;
  explicit Aligned(int64_t n)
      : p(static_cast<T*>(::operator new[](n * sizeof(T), std::align_val_t(64))),
          [](T* q) { ::operator delete[](q, std::align_val_t(64)); }) {}
  T* get() const { return p.get(); }
};

// C tile (mr x nr valid of MR x NR) = or += the accumulators.
template <class T, class V, int MR, int NV>
[[gnu::always_inline]] inline void store_tile(V (&acc)[MR][NV], T* c, int64_t ldc, int64_t mr, int64_t nr,
                                              bool accumulate) {
  constexpr int L = sizeof(V) / sizeof(T);
  if (mr == MR && nr == NV * L) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) {
        T* p = c + i * ldc + j * L;
        V v = acc[i][j];
        if (accumulate) {
          V old;
          std::memcpy(&old, p, sizeof(V));
          v += old;
        }
        std::memcpy(p, &v, sizeof(V));
      }
    return;
  }
  alignas(64) T tile[MR][NV * L];
  std::memcpy(tile, acc, sizeof(tile));
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i][j] : tile[i][j];
}

// C[mc x nc] (+)= packed A block (MR-row panels, kc deep) x packed B strips
// (NR wide, kc deep). Everything here is inlined into a target-specific
// wrapper, so the vector code uses that target's registers.
template <class T, class V, int MR, int NV>
[[gnu::always_inline]] inline void macro_kernel(const T* ap, const T* bp, T* c, int64_t ldc, int64_t mc,
                                                int64_t nc, int64_t kc, bool accumulate) {
  constexpr int L = sizeof(V) / sizeof(T);
  constexpr int NR = NV * L;
  for (int64_t jr = 0; jr < nc; jr += NR) {
    const T* b = bp + jr * kc;
    for (int64_t ir = 0; ir < mc; ir += MR) {
      const T* a = ap + ir * kc;
      V acc[MR][NV];
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NV; ++j) acc[i][j] = V{};
      for (int64_t k = 0; k < kc; ++k) {
        V bv[NV];
#pragma GCC unroll 8
        for (int j = 0; j < NV; ++j) std::memcpy(&bv[j], b + k * NR + j * L, sizeof(V));
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const V av = V{} + a[k * MR + i];  // broadcast
#pragma GCC unroll 8
          for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
        }
      }
      store_tile<T, V, MR, NV>(acc, c + ir * ldc + jr, ldc, std::min<int64_t>(MR, mc - ir),
                               std::min<int64_t>(NR, nc - jr), accumulate);
    }
  }
}

template <class T>
using MacroFn = void (*)(const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t, bool);

#define LOOM_MACRO(name, isa, T, V, MR, NV)                                                         \
  __attribute__((target(isa))) void name(const T* ap, const T* bp, T* c, int64_t ldc, int64_t mc, \
                                            int64_t nc, int64_t kc, bool acc) {                      \
    macro_kernel<T, V, MR, NV>(ap, bp, c, ldc, mc, nc, kc, acc);                                      \
  }
// AVX-512: 12 x 32 floats = 24 zmm accumulators, enough independent FMAs to
// hide their latency. AVX2: 6 x 16 = 12 ymm. SSE2: 4 x 8 = 8 xmm.
LOOM_MACRO(macro_f32_avx512, "avx512f,fma", float, v16f, 12, 2)
LOOM_MACRO(macro_f32_avx2, "avx2,fma", float, v8f, 6, 2)
LOOM_MACRO(macro_f32_sse, "sse2", float, v4f, 4, 2)
LOOM_MACRO(macro_f64_avx512, "avx512f,fma", double, v8d, 12, 2)
LOOM_MACRO(macro_f64_avx2, "avx2,fma", double, v4d, 6, 2)
LOOM_MACRO(macro_f64_sse, "sse2", double, v2d, 4, 2)
#undef LOOM_MACRO

template <class T>
struct Gemm {
  MacroFn<T> macro;
  int64_t mr, nr;
};

template <class T>
Gemm<T> pick_gemm() {
  constexpr int64_t w = 64 / sizeof(T);  // lanes of a 512-bit vector
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if constexpr (std::is_same_v<T, float>) {
    if (avx512) return {macro_f32_avx512, 12, 2 * w};
    if (avx2) return {macro_f32_avx2, 6, w};
    return {macro_f32_sse, 4, w / 2};
  } else {
    if (avx512) return {macro_f64_avx512, 12, 2 * w};
    if (avx2) return {macro_f64_avx2, 6, w};
    return {macro_f64_sse, 4, w / 2};
  }
}

// B[pc:pc+kc, jc:jc+nc] -> strips of nr columns, k-major inside a strip,
// zero padded to a whole strip so the micro-kernel never branches.
template <class T>
void pack_b(const T* b, int64_t ldb, int64_t kc, int64_t nc, int64_t nr, T* bp) {
  for (int64_t jr = 0; jr < nc; jr += nr) {
    const int64_t w = std::min(nr, nc - jr);
    T* dst = bp + jr * kc;
    for (int64_t k = 0; k < kc; ++k) {
      std::memcpy(dst + k * nr, b + k * ldb + jr, w * sizeof(T));
      std::fill(dst + k * nr + w, dst + (k + 1) * nr, T(0));
    }
  }
}

// A[ic:ic+mc, pc:pc+kc] -> panels of mr rows, interleaved by k, zero padded.
template <class T>
void pack_a(const T* a, int64_t lda, int64_t mc, int64_t kc, int64_t mr, T* ap) {
  for (int64_t ir = 0; ir < mc; ir += mr) {
    const int64_t h = std::min(mr, mc - ir);
    T* dst = ap + ir * kc;
    for (int64_t i = 0; i < mr; ++i) {
      if (i < h) {
        const T* src = a + (ir + i) * lda;
        for (int64_t k = 0; k < kc; ++k) dst[k * mr + i] = src[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) dst[k * mr + i] = T(0);
      }
    }
  }
}

// One [M,K] x [K,N] product. `parallel`: split it across cores (false when
// the caller already runs one product per core).
template <class T>
void gemm(const Gemm<T>& g, const T* a, const T* b, T* c, int64_t M, int64_t N, int64_t K, bool parallel) {
  if (K == 0) {
    std::fill(c, c + M * N, T(0));
    return;
  }
  const int64_t nc_max = std::min(NC, (N + g.nr - 1) / g.nr * g.nr);
  Aligned<T> bp(KC * nc_max);
  const int64_t mblocks = (M + MC - 1) / MC;
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    const int64_t strips = (nc + g.nr - 1) / g.nr;
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      pack_b(b + pc * N + jc, N, kc, nc, g.nr, bp.get());
      // Tasks: (block of MC rows) x (group of strips). Few row blocks (a
      // short M) are made up for by splitting the columns.
      const int64_t groups = parallel ? std::clamp<int64_t>(16 / mblocks, 1, strips) : 1;
      auto task = [&](int64_t t) {
        const int64_t ib = t / groups, gi = t % groups;
        const int64_t ic = ib * MC, mc = std::min(MC, M - ic);
        const int64_t s0 = strips * gi / groups, s1 = strips * (gi + 1) / groups;
        const int64_t j0 = s0 * g.nr, j1 = std::min(nc, s1 * g.nr);
        if (j0 >= j1) return;
        Aligned<T> ap((mc + g.mr - 1) / g.mr * g.mr * kc);
        pack_a(a + ic * K + pc, K, mc, kc, g.mr, ap.get());
        g.macro(ap.get(), bp.get() + j0 * kc, c + ic * N + jc + j0, N, mc, j1 - j0, kc, pc > 0);
      };
      const int64_t tasks = mblocks * groups;
      if (parallel && tasks > 1 && M * nc * kc >= (1 << 15))
        tbb::parallel_for(int64_t(0), tasks, task);
      else
        for (int64_t t = 0; t < tasks; ++t) task(t);
    }
  }
}

// Tiny products (a control loop's [1,64] x [64,64]): packing panels costs
// more than the product, so each row of C is a sum over k of a[k] * B's row
// k, accumulated in registers, VW columns at a time (4 vectors: 64 floats
// with AVX-512). Every element is ((0 + a0*b0) + a1*b1) + ... in k order,
// one rounding per multiply and per add, as the plain loop this replaced
// computed it on baseline x86-64: the empty asm keeps each product rounded
// on its own (GCC would otherwise fuse it into an FMA where the target has
// one), so the AVX-512, AVX2 and baseline builds below agree bit for bit.
template <class V>
[[gnu::always_inline]] inline V rounded_product(V a, V b) {
  V p = a * b;
  __asm__("" : "+x"(p));
  return p;
}
template <class T, class V>
[[gnu::always_inline]] inline void tiny_rows(const T* pa, const T* pb, T* pc, int64_t B, int64_t M, int64_t N,
                                             int64_t K) {
  constexpr int64_t L = sizeof(V) / sizeof(T);
  constexpr int64_t VW = 4 * L;
  for (int64_t row = 0; row < B * M; ++row) {
    const T* arow = pa + row * K;
    const T* bmat = pb + (row / M) * K * N;
    T* crow = pc + row * N;
    int64_t j = 0;
    for (; j + VW <= N; j += VW) {
      V acc[4] = {V{}, V{}, V{}, V{}};
      for (int64_t k = 0; k < K; ++k) {
        const V av = V{} + arow[k];  // broadcast
        const T* brow = bmat + k * N + j;
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
          V bv;
          std::memcpy(&bv, brow + q * L, sizeof(V));
          acc[q] += rounded_product(av, bv);
        }
      }
      std::memcpy(crow + j, acc, sizeof(acc));
    }
    for (; j < N; ++j) {
      T acc = T(0);
      for (int64_t k = 0; k < K; ++k) acc += rounded_product(arow[k], bmat[k * N + j]);
      crow[j] = acc;
    }
  }
}

template <class T>
using TinyFn = void (*)(const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t);
#define LOOM_TINY(name, isa, T, V)                                                                     \
  __attribute__((target(isa))) void name(const T* pa, const T* pb, T* pc, int64_t B, int64_t M, int64_t N, \
                                         int64_t K) {                                                  \
    tiny_rows<T, V>(pa, pb, pc, B, M, N, K);                                                           \
  }
LOOM_TINY(tiny_f32_avx512, "avx512f", float, v16f)
LOOM_TINY(tiny_f32_avx2, "avx2", float, v8f)
LOOM_TINY(tiny_f32_sse, "sse2", float, v4f)
LOOM_TINY(tiny_f64_avx512, "avx512f", double, v8d)
LOOM_TINY(tiny_f64_avx2, "avx2", double, v4d)
LOOM_TINY(tiny_f64_sse, "sse2", double, v2d)
#undef LOOM_TINY

template <class T>
TinyFn<T> pick_tiny() {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2");
  if constexpr (std::is_same_v<T, float>) return avx512 ? tiny_f32_avx512 : avx2 ? tiny_f32_avx2 : tiny_f32_sse;
  else return avx512 ? tiny_f64_avx512 : avx2 ? tiny_f64_avx2 : tiny_f64_sse;
}

template <class T>
void matmul_float(const View& a, const View& b, const View& out) {
  int64_t B, M, K, N;
  dims(a, b, B, M, K, N);
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  T* pc = static_cast<T*>(out.data);
  if (B * M * N * K <= (1 << 15)) {
    static const TinyFn<T> tiny = pick_tiny<T>();  // the host's CPU never changes
    tiny(pa, pb, pc, B, M, N, K);
    return;
  }
  static const Gemm<T> g = pick_gemm<T>();
  auto one = [&](int64_t bi, bool parallel) {
    gemm<T>(g, pa + bi * M * K, pb + bi * K * N, pc + bi * M * N, M, N, K, parallel);
  };
  // Many small products: one per task. Large ones: split each.
  if (B > 1 && M * N * K < (1 << 21))
    tbb::parallel_for(int64_t(0), B, [&](int64_t bi) { one(bi, false); });
  else
    for (int64_t bi = 0; bi < B; ++bi) one(bi, true);
}

// Integers wrap (computed in the unsigned type of the same width, where
// overflow is defined); bool is an or of ands. Exact in any order.
template <class T>
void matmul_exact(const View& a, const View& b, const View& out) {
  int64_t B, M, K, N;
  dims(a, b, B, M, K, N);
  using U = std::conditional_t<std::is_same_v<T, bool>, uint8_t,
                               std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  const U* pa = static_cast<const U*>(a.data);
  const U* pb = static_cast<const U*>(b.data);
  U* pc = static_cast<U*>(out.data);
  auto rows = [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t row = r.begin(); row < r.end(); ++row) {
      const int64_t bi = row / M;
      const U* arow = pa + row * K;
      const U* bmat = pb + bi * K * N;
      U* crow = pc + row * N;
      std::fill(crow, crow + N, U(0));
      for (int64_t k = 0; k < K; ++k) {
        const U av = arow[k];
        const U* brow = bmat + k * N;
        if constexpr (std::is_same_v<T, bool>) {
          if (av)
            for (int64_t j = 0; j < N; ++j) crow[j] |= static_cast<U>(brow[j] != 0);
        } else {
          for (int64_t j = 0; j < N; ++j) crow[j] = static_cast<U>(crow[j] + static_cast<U>(av * brow[j]));
        }
      }
    }
  };
  const int64_t grain = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, N * K));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, B * M, grain), rows);
}

}  // namespace

void matmul(const View& a, const View& b, const View& out) {
  switch (out.dtype) {
    case ScalarType::Float: return matmul_float<float>(a, b, out);
    case ScalarType::Double: return matmul_float<double>(a, b, out);
    case ScalarType::Int: return matmul_exact<int32_t>(a, b, out);
    case ScalarType::Long: return matmul_exact<int64_t>(a, b, out);
    case ScalarType::Bool: return matmul_exact<bool>(a, b, out);
  }
}

}  // namespace loom::kernels::cpu
