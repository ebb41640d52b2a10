// Conv2d and its two gradients as implicit GEMMs, for float32, float64,
// bfloat16 and float16. Compiled by NVRTC after kernels/cuda/bfloat16.cuh
// (loom_bf16_narrow, loom_f16_narrow) and kernels/cuda/meta_layout.h (the
// `conv` meta block, element_offset), with builtins only: no includes,
// 64-bit integers as long long.
//
// Semantics (PyTorch's conv2d, zero padding, groups G): x [N,C,H,W],
// w [O,C/G,KH,KW], dout [N,O,OH,OW], all contiguous, Cg = C/G, Og = O/G,
// OH = (H + 2 pH - dH (KH - 1) - 1) / sH + 1 (and OW), taken from meta:
//   fwd          out[n,o,oh,ow] = sum_{c,r,s} x[n, g Cg + c, oh sH - pH + r dH,
//                                               ow sW - pW + s dW] w[o,c,r,s]
//                (g = o / Og; positions outside x read as zero)
//   grad_input   dx[n,c,h,w] = sum over (o, r, s) with h + pH - r dH = oh sH,
//                w + pW - s dW = ow sW, 0 <= oh < OH, 0 <= ow < OW, of
//                dout[n,o,oh,ow] w[o, c % Cg, r, s]  (o in c's group)
//   grad_weight  dw[s][o][c][r][kw] = sum over the split's samples n, oh, ow
//                of dout[n,o,oh,ow] x[n, g Cg + c, oh sH - pH + r dH, ...]:
//                S partial sums [S,O,Cg,KH,KW] in float32 (float64 for f64),
//                split s taking n in [s N / S, (s+1) N / S); S = 1 is the
//                whole gradient.
// Sums are float32 for f32, bf16 and f16 and float64 for f64; bf16 and f16
// products run on the tensor cores (mma.sync m16n8k16, float32
// accumulators) and round once, when stored. Offsets inside one sample of
// one tensor (C H W, O OH OW elements) and the weight's size are 32-bit
// ints: each must stay below 2^31 (sample and split offsets are 64-bit).
//
// ---------------------------------------------------------------------------
// Entry points (meta_layout.h, `conv`, gives the fields and the launch):
//   loom_conv2d_{fwd,grad_input,grad_weight}_{f32,f64,bf16,f16}
//     (void* const* bufs, const double* fs, const long long* is,
//      long long* err, const long long* meta)
//   block 256 threads, grid (ceil(M/128), ceil(cols/64), G S), z = g + G s,
//   static shared memory only (under 40 KB), fs and err unused. K = 0 (an
//   empty split) writes zeros.
// Each is C[m, col] = sum_k A[m, k] B[k, col] over one group (and split):
//   fwd          m = (n, oh, ow)   col = o in group   k = (c, r, s)
//                A = x gathered,   B[k, col] = w[g Og + col][c][r][s]
//   grad_input   m = (n, h, w)     col = c in group   k = (o, r, s)
//                A = dout gathered (zero where the tap misses the stride
//                grid), B[k, col] = w[g Og + o][col][r][s]
//   grad_weight  m = (c, r, s)     col = o in group   k = (n, oh, ow)
//                A = x gathered,   B[k, col] = dout[n][g Og + col][oh][ow]
// (The m and k orders shown; some shapes reorder them, below.) An output
// column is contiguous along m (an output plane, or a weight row), which
// the epilogue's stores follow.
//
// Tiling: a block computes a 128 (m) x 64 (col) tile in K slices of BK (32
// for bf16/f16, 16 for f32, 8 for f64). Per slice, every thread gathers its
// share of A (BK x 128) and B (BK x 64) from global memory into registers
// while the block multiplies the previous slice from shared memory (two
// shared buffers, one barrier a slice; no cp.async: the operands are
// gathered, 16-bit values two to a register). grad_weight on the tensor
// cores with unit stride along W and OW % 8 == 0 takes A (x) in chunks of 8
// consecutive elements of one row (vec_a: one or two aligned 16-byte loads,
// shifted into place and masked where the padding falls) and B (dout) in
// aligned 16-byte chunks, as fwd takes its weight rows (vec_b); the rest
// go element by element.
//
// The gather. The k digits of a slice ((channel, r, s), or (sample, oh, ow)
// for grad_weight) go, one slice ahead, into a small shared table built by
// the first BK threads (stepping digits kept from the slice before: no
// divisions in the loop): A's offset of k, the tap's share (ch, cw) of the
// input coordinate, a stride phase, and B's offset. A row m's digits are
// worked out once a block: in registers for fwd and grad_input (each thread
// keeps two rows, or one for f32/f64), in a shared table for grad_weight.
// An element of A is then
//     ok = (unsigned)(ah(m) - ch(k)) < LH && (unsigned)(aw(m) - cw(k)) < LW
//          [&& phase(m) == phase(k), grad_input]
//     A[m, k] = ok ? row(m)[off(k)] : 0
// with LH x LW the plane A's coordinates live in. For grad_input, with
// h + pH = sH ah + bh and r dH = sH ch + dh, the tap hits the stride grid
// iff bh == dh (the phase is bh sW + bw against dh sW + dw), and then
// oh = ah - ch. A row past M has ah = 2^30 and a k past K ch = cw = -2^30,
// so neither ever loads.
//
// Three orders make the test once a slice (for all of a thread's elements
// of that slice) instead of once an element, where the shapes allow:
// - grad_input whose O/G is a multiple of BK (and fwd whose C/G is, unless
//   its B is read in 16-byte chunks, below) takes k channel-blocked,
//   k = ((cb KH + r) KW + s) BK + ci: a slice is one tap of BK channels,
//   and the KH KW slices of a channel block follow each other (their reads
//   of x and w stay in L1);
// - grad_input blocked so with a stride also orders its rows by phase,
//   m = (n, (bh, bw), hq, wq), and a block visits only the taps that hit a
//   phase of its rows (a quarter of them for stride 2, none for the rows of
//   a 1x1 stride-2 kernel that no output reads);
// - grad_weight whose C/G is a multiple of 128 (or whose kernel is 1x1)
//   takes its rows tap-major, m = (r KW + s) C/G + c: a block is one tap.
// Which index runs along a warp follows the memory: m (consecutive ow, or
// w) for the A of fwd and grad_input, k (consecutive ow) for grad_weight's
// A and B, k for fwd's B (a weight row w[o] is contiguous in (c, r, s): on
// the tensor cores, when K % 8 == 0 and the weight is 16-byte aligned, read
// 16 bytes at a time, in (c, r, s) order), the column c for grad_input's B
// (w[o][c][r][s]: consecutive c are KH KW apart, consecutive o C/G KH KW).
//
// The products. bf16/f16: 8 warps of 32 (m) x 32 (col); each k16 step two
// ldmatrix.x4 of A (.trans from fwd/grad_input's k-major tile [BK][128+8],
// plain from grad_weight's m-major [128][BK+8]), two of B ([64][BK+8]) and
// eight m16n8k16 products. Every padded row is an odd number of 16-byte
// chunks, so the eight rows an ldmatrix phase reads hit distinct banks.
// f32/f64: 16 x 16 threads of 8 (m) x 4 (col) register tiles over k-major
// tiles [BK][128+4] and [BK][64+4], explicit fmas (NVRTC runs with
// --fmad=false).
//
// The epilogue: the sums go through shared memory (col-major, [cols][128+4]
// floats or doubles, in two passes for f64, over the tiles' bytes), and a
// thread stores 16 bytes of consecutive m of one output plane when every
// plane is a multiple of 16 bytes and the buffer 16-byte aligned (else,
// and for rows in phase or tap order, an element at a time, a warp's 32
// lanes on 32 rows of one column).
//
// Resources (ptxas under NVRTC, sm_90): bf16/f16 128 registers (launch
// bounds: 256 threads, 2 blocks an SM; no spills); f32 about 150 and f64
// about 190-210 registers, one block an SM; 34-38 KB of static shared
// memory. The module (12 kernels) takes about 7 s to compile.

#ifndef LOOM_CONV_FWD_BLOCKED
#define LOOM_CONV_FWD_BLOCKED 0
#endif

#define LOOM_CONV_PARAMS \
  void *const *bufs, const double *fs, const long long *is, long long *err, const long long *meta

enum : int { kLoomConvFwd = 0, kLoomConvGradInput = 1, kLoomConvGradWeight = 2 };

// ---------------------------------------------------------------------------
// PTX helpers.

__device__ __forceinline__ unsigned loom_conv_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// ldmatrix.x4: lane l gives the address of row l % 8 of matrix l / 8; each
// thread receives r[i] = matrix i's (row lane/4, cols 2 (lane%4), +1), or
// with TRANS its (rows 2 (lane%4), +1, col lane/4). volatile without a
// memory operand: the barriers order it against the shared stores.
template <bool TRANS>
__device__ __forceinline__ void loom_conv_ldsm4(unsigned (&r)[4], const void* p) {
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(loom_conv_smem_addr(p)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(loom_conv_smem_addr(p)));
}

// d (16x8 f32) += a (16x16, row) * b (16x8, col). Fragments (g = lane/4,
// t = lane%4): a[0] (row g, k 2t,+1), a[1] (row g+8, k 2t,+1), a[2] (row g,
// k 2t+8,+9), a[3] (row g+8, k 2t+8,+9); b0 (k 2t,+1, col g), b1 (k 2t+8,+9,
// col g); d[0..1] (row g, cols 2t,+1), d[2..3] (row g+8, cols 2t,+1); the
// lower index in the low half of each 32-bit register.
__device__ __forceinline__ void loom_conv_mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void loom_conv_mma_f16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// p, as a value the compiler cannot see through: p + i stays one 64-bit
// add of a 32-bit offset, instead of being re-associated into wider
// arithmetic on p's parts.
template <class T>
__device__ __forceinline__ const T* loom_conv_opaque(const T* p) {
  asm("" : "+l"(p));
  return p;
}

// a / b for a >= 0, b > 0: one 32-bit division when both fit.
__device__ __forceinline__ long long loom_conv_div(long long a, long long b) {
  if ((unsigned long long)(a | b) <= 0xffffffffull) return (long long)((unsigned)a / (unsigned)b);
  return a / b;
}

// Eight consecutive 16-bit values from p, which may be 2-byte aligned only:
// the one or two aligned 16-byte granules that hold them, shifted into
// place (a run of 2-byte loads costs eight load instructions instead).
// Every byte of both granules must be readable.
__device__ __forceinline__ uint4 loom_conv_ld8_any(const unsigned short* p) {
  const unsigned long long a = (unsigned long long)p;
  const uint4* q = reinterpret_cast<const uint4*>(a & ~15ull);
  const int sh = (int)(a & 15) >> 1;  // p's element within the first granule
  const uint4 lo = __ldg(q);
  if (sh == 0) return lo;
  const uint4 hi = __ldg(q + 1);
  const unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const int k = sh >> 1;  // the word holding element sh
  unsigned s[5];
#pragma unroll
  for (int j = 0; j < 5; ++j) s[j] = k == 0 ? w[j] : k == 1 ? w[j + 1] : k == 2 ? w[j + 2] : w[j + 3];
  if (sh & 1)  // each result word straddles two: the high half of one, the low half of the next
    return make_uint4(__byte_perm(s[0], s[1], 0x5432), __byte_perm(s[1], s[2], 0x5432),
                      __byte_perm(s[2], s[3], 0x5432), __byte_perm(s[3], s[4], 0x5432));
  return make_uint4(s[0], s[1], s[2], s[3]);
}

__device__ __forceinline__ float loom_conv_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double loom_conv_fma(double a, double b, double c) { return __fma_rn(a, b, c); }
// Four consecutive values from / to 16-byte aligned shared memory.
__device__ __forceinline__ void loom_conv_ld4(float (&v)[4], const float* p) {
  const float4 x = *reinterpret_cast<const float4*>(p);
  v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
}
__device__ __forceinline__ void loom_conv_ld4(double (&v)[4], const double* p) {
  const double2 x = reinterpret_cast<const double2*>(p)[0], y = reinterpret_cast<const double2*>(p)[1];
  v[0] = x.x, v[1] = x.y, v[2] = y.x, v[3] = y.y;
}
__device__ __forceinline__ void loom_conv_st4(float* p, float a, float b, float c, float d) {
  *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
}
__device__ __forceinline__ void loom_conv_st4(double* p, double a, double b, double c, double d) {
  reinterpret_cast<double2*>(p)[0] = make_double2(a, b);
  reinterpret_cast<double2*>(p)[1] = make_double2(c, d);
}

// ---------------------------------------------------------------------------
// Per-dtype traits: storage T, accumulator Acc, tensor cores or not, the K
// slice, and the rounding of a sum into T.

// bfloat16 (BF16) or float16 storage, summed on the tensor cores.
template <bool BF16>
struct LoomConvHalf {
  typedef unsigned short T;
  typedef float Acc;
  enum : int { kMma = 1, kBK = 32 };
  static __device__ __forceinline__ T narrow(float v) { return BF16 ? loom_bf16_narrow(v) : loom_f16_narrow(v); }
  static __device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if (BF16)
      loom_conv_mma_bf16(d, a, b0, b1);
    else
      loom_conv_mma_f16(d, a, b0, b1);
  }
};
typedef LoomConvHalf<true> LoomConvBf16;
typedef LoomConvHalf<false> LoomConvF16;
struct LoomConvF32 {
  typedef float T;
  typedef float Acc;
  enum : int { kMma = 0, kBK = 16 };
  static __device__ __forceinline__ T narrow(float v) { return v; }
};
struct LoomConvF64 {
  typedef double T;
  typedef double Acc;
  enum : int { kMma = 0, kBK = 8 };
  static __device__ __forceinline__ T narrow(double v) { return v; }
};

// The block's tiles and shared-memory layout (in elements of T unless
// said). A slice's A tile is k-major [BK][LDA] (m contiguous) but for
// grad_weight on the tensor cores, m-major [BM][LDA] (k contiguous); B is
// [BN][LDB] (k contiguous) on the tensor cores, [BK][LDB] (col contiguous)
// for the FMA tiles. The epilogue's staging [CH][LDC] of Acc reuses the
// same bytes. A thread gathers P elements adjacent along the tile's
// contiguous dimension at a time (two 16-bit values: one 32-bit shared
// store).
template <class Tr, int KIND>
struct LoomConvTiles {
  typedef typename Tr::T T;
  typedef typename Tr::Acc Acc;
  enum : int {
    BM = 128,
    BN = 64,
    NT = 256,
    BK = Tr::kBK,
    MMA = Tr::kMma,
    A_ALONG_K = KIND == kLoomConvGradWeight,  // the gather of A walks k (else m) along a warp
    A_MMAJOR = MMA && A_ALONG_K,             // A tile [BM][LDA] instead of [BK][LDA]
    LDA = A_MMAJOR ? BK + 8 : (MMA ? BM + 8 : BM + 4),
    A_ELEMS = A_MMAJOR ? BM * LDA : BK * LDA,
    LDB = MMA ? BK + 8 : BN + 4,
    B_ELEMS = MMA ? BN * LDB : BK * LDB,
    TILE_BYTES = 2 * (A_ELEMS + B_ELEMS) * (int)sizeof(T),
    CH = (int)sizeof(Acc) == 4 ? BN : BN / 2,  // columns staged per epilogue pass
    LDC = BM + 4,
    STAGE_BYTES = CH * LDC * (int)sizeof(Acc),
    SMEM_BYTES = TILE_BYTES > STAGE_BYTES ? TILE_BYTES : STAGE_BYTES,
    P = (int)sizeof(T) == 2 ? 2 : 1,
    AJ = BK * BM / NT,  // A elements a thread gathers per slice
    BJ = BK * BN / NT,  // B elements
    MT = BM / P,        // threads along m (gathering A along m)
    KT = BK / P,        // threads along k (A along k, B)
  };
  static_assert(NT % MT == 0 && NT % KT == 0 && AJ % P == 0 && BJ % P == 0, "conv tiles");
  static_assert((NT / MT) * (AJ / P) == BK && (NT / KT) * (AJ / P) == BM && (NT / KT) * (BJ / P) == BN, "conv gather");
  static_assert((A_ELEMS * (int)sizeof(T)) % 16 == 0 && (B_ELEMS * (int)sizeof(T)) % 16 == 0, "conv tile alignment");
};

// ---------------------------------------------------------------------------
// The products of one shared slice. MMA: warp (wm = warp % 4, wn = warp / 4)
// owns rows 32 wm.. and cols 32 wn.., acc[mi][ni] the 16x8 tile at
// (32 wm + 16 mi, 32 wn + 8 ni).
template <class Tr, int KIND, bool MMA = Tr::kMma>
struct LoomConvEngine {
  typedef LoomConvTiles<Tr, KIND> L;
  float acc[2][4][4];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
  }

  __device__ __forceinline__ void compute(const unsigned short* As, const unsigned short* Bs) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wm = warp % 4, wn = warp / 4;
    const int mat = lane / 8, r8 = lane % 8;
#pragma unroll
    for (int kk = 0; kk < L::BK; kk += 16) {
      unsigned af[2][4], bf[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int m = wm * 32 + mi * 16;
        if (L::A_MMAJOR)  // A(m, k) = As[m * LDA + k]: matrices (m 0-7 | 8-15) x (k 0-7 | 8-15), m fastest
          loom_conv_ldsm4<false>(af[mi], As + (m + (mat % 2) * 8 + r8) * L::LDA + kk + (mat / 2) * 8);
        else  // A(m, k) = As[k * LDA + m], transposed on the way
          loom_conv_ldsm4<true>(af[mi], As + (kk + (mat / 2) * 8 + r8) * L::LDA + m + (mat % 2) * 8);
      }
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        // B(k, n) = Bs[n * LDB + k]: matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
        unsigned f[4];
        loom_conv_ldsm4<false>(f, Bs + (wn * 32 + nj * 16 + (mat / 2) * 8 + r8) * L::LDB + kk + (mat % 2) * 8);
        bf[2 * nj][0] = f[0], bf[2 * nj][1] = f[1], bf[2 * nj + 1][0] = f[2], bf[2 * nj + 1][1] = f[3];
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) Tr::mma(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
    }
  }

  // The accumulators of columns [pass CH, pass CH + CH) into Cs[col][m].
  __device__ __forceinline__ void stage(float* Cs, int pass) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wm = warp % 4, wn = warp / 4;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int m = wm * 32 + mi * 16 + g + (e / 2) * 8, col = wn * 32 + ni * 8 + 2 * t + e % 2 - pass * L::CH;
          if (col >= 0 && col < L::CH) Cs[col * L::LDC + m] = acc[mi][ni][e];
        }
  }
};

// FMA: thread (tx = tid % 16, ty = tid / 16) owns rows 4 tx.. and 64 + 4 tx..
// (acc[0..3] and acc[4..7]) and cols 4 ty..
template <class Tr, int KIND>
struct LoomConvEngine<Tr, KIND, false> {
  typedef LoomConvTiles<Tr, KIND> L;
  typedef typename Tr::Acc Acc;
  Acc acc[8][4];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = Acc(0);
  }

  __device__ __forceinline__ void compute(const Acc* As, const Acc* Bs) {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int k = 0; k < L::BK; ++k) {
      Acc a[8], b[4], lo[4], hi[4];
      loom_conv_ld4(lo, As + k * L::LDA + 4 * tx);
      loom_conv_ld4(hi, As + k * L::LDA + L::BM / 2 + 4 * tx);
      loom_conv_ld4(b, Bs + k * L::LDB + 4 * ty);
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = lo[i], a[4 + i] = hi[i];
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = loom_conv_fma(a[i], b[j], acc[i][j]);
    }
  }

  __device__ __forceinline__ void stage(Acc* Cs, int pass) {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = 4 * ty + j - pass * L::CH;
      if (col >= 0 && col < L::CH) {
        loom_conv_st4(Cs + col * L::LDC + 4 * tx, acc[0][j], acc[1][j], acc[2][j], acc[3][j]);
        loom_conv_st4(Cs + col * L::LDC + L::BM / 2 + 4 * tx, acc[4][j], acc[5][j], acc[6][j], acc[7][j]);
      }
    }
  }
};

// A thread's gathered slice between the loads and the shared stores, in
// groups of P adjacent elements: 16-bit values two to a 32-bit register.
template <class T, int N>
struct LoomConvRegs {
  T v[N];
  __device__ __forceinline__ void set(int j, T x) { v[j] = x; }
  __device__ __forceinline__ void put(T* dst, int group) const { *dst = v[group]; }
};
template <int N>
struct LoomConvRegs<unsigned short, N> {
  unsigned v[N / 2];
  __device__ __forceinline__ void set(int j, unsigned short x) {
    if (j % 2 == 0)
      v[j / 2] = x;
    else
      v[j / 2] |= (unsigned)x << 16;
  }
  __device__ __forceinline__ void put(unsigned short* dst, int group) const {
    *reinterpret_cast<unsigned*>(dst) = v[group];
  }
};

// The output's type (T, but Acc for grad_weight), the rounding into it, and
// V = 16 bytes of it from V sums in shared memory (16-byte aligned both).
template <class Out, class Acc, class Tr>
struct LoomConvStore {
  enum : int { V = 16 / (int)sizeof(Out) };
  static __device__ __forceinline__ void store_vec(Out* dst, const Acc* src) {
    union {
      uint4 q[V * (int)sizeof(Acc) / 16];
      Acc a[V];
    } in;
    union {
      uint4 q;
      Out o[V];
    } res;
#pragma unroll
    for (int i = 0; i < V * (int)sizeof(Acc) / 16; ++i) in.q[i] = reinterpret_cast<const uint4*>(src)[i];
#pragma unroll
    for (int i = 0; i < V; ++i) res.o[i] = cvt(in.a[i]);
    *reinterpret_cast<uint4*>(dst) = res.q;
  }
  static __device__ __forceinline__ Out cvt(Acc v) { return Tr::narrow(v); }
};
template <class Tr, int KIND>
struct LoomConvOut : LoomConvStore<typename Tr::T, typename Tr::Acc, Tr> {
  typedef typename Tr::T type;
};
struct LoomConvKeep {
  static __device__ __forceinline__ float narrow(float v) { return v; }
  static __device__ __forceinline__ double narrow(double v) { return v; }
};
template <class Tr>
struct LoomConvOut<Tr, kLoomConvGradWeight> : LoomConvStore<typename Tr::Acc, typename Tr::Acc, LoomConvKeep> {
  typedef typename Tr::Acc type;
};

// ---------------------------------------------------------------------------
// One block of one kernel.

// A coordinate that never lands in the plane: a row past M has ah = kFar,
// a k past K has ch = cw = -kFar, and (unsigned)(ah - ch) >= 2^30 > LH.
// kMaxTaps: grad_input skips the taps that miss its rows' stride phases
// for kernels of at most this many taps.
enum : int { kLoomConvFar = 1 << 30, kLoomConvMaxTaps = 64 };

template <class Tr, int KIND>
__device__ __forceinline__ void loom_conv_run(void* const* bufs, const long long* is, const long long* meta) {
  namespace cm = loom::kernels::cuda::meta_layout::conv;
  typedef typename Tr::T T;
  typedef typename Tr::Acc Acc;
  typedef LoomConvTiles<Tr, KIND> L;
  typedef LoomConvOut<Tr, KIND> Out;
  enum : int { BM = L::BM, BN = L::BN, NT = L::NT, BK = L::BK, P = L::P, MT = L::MT, KT = L::KT };
  // B may come as 16-byte chunks (vec_b), and grad_weight's A too.
  enum : int {
    VEC_B = L::MMA && (KIND == kLoomConvFwd || KIND == kLoomConvGradWeight),
    VEC_A = L::MMA && KIND == kLoomConvGradWeight
  };
  static_assert(BM == cm::kTileM && BN == cm::kTileN && NT == cm::kThreads, "meta_layout.h's conv tiles differ");

  __shared__ __align__(16) unsigned char smem[L::SMEM_BYTES];
  // A slice's k table, two slices: {offset of k in A (fwd, grad_input), ch,
  // cw, phase (grad_input)}, A's 64-bit offset (grad_weight), B's offset.
  __shared__ int4 ktab[2][BK];
  __shared__ long long ktab_a[2][BK], ktab_b[2][BK];
  // grad_weight's rows: {offset of m in A, ah, aw, 0}.
  __shared__ int4 mtab[BM];
  // grad_input with strides (phased): the phases of the block's rows, and
  // the taps (r, s) that hit one of them.
  __shared__ unsigned phase_mask;
  __shared__ int ntaps;
  __shared__ int2 taps[kLoomConvMaxTaps];
  // The table builders' k digits, and BK's.
  __shared__ int4 kdig[BK + 1];

  const int tid = threadIdx.x;
  const long long N = meta[cm::kN], C = meta[cm::kC], O = meta[cm::kO], G = meta[cm::kGroups];
  const int H = (int)meta[cm::kH], W = (int)meta[cm::kW], OH = (int)meta[cm::kOH], OW = (int)meta[cm::kOW];
  const int KH = (int)meta[cm::kKH], KW = (int)meta[cm::kKW];
  const int sH = (int)meta[cm::kStrideH], sW = (int)meta[cm::kStrideW];
  const int pH = (int)meta[cm::kPadH], pW = (int)meta[cm::kPadW];
  const int dH = (int)meta[cm::kDilH], dW = (int)meta[cm::kDilW];
  const int Cg = (int)(C / G), Og = (int)(O / G), KHKW = KH * KW, HW = H * W, OHW = OH * OW;
  const long long g = (long long)blockIdx.z % G, split = (long long)blockIdx.z / G;

  const T* Ap = (const T*)bufs[meta[cm::kA]] + loom::kernels::cuda::meta_layout::element_offset(meta[cm::kAOffset], is);
  const T* Bp = (const T*)bufs[meta[cm::kB]] + loom::kernels::cuda::meta_layout::element_offset(meta[cm::kBOffset], is);

  // The GEMM: M rows, cols columns, K terms; LH x LW is the plane A's
  // coordinates must fall in; k = (k2 R1 + k1) R0 + k0.
  long long M, K, n0 = 0;
  int cols, LH, LW, R1, R0;
  if (KIND == kLoomConvFwd) {
    M = N * OHW, cols = Og, K = (long long)Cg * KHKW, LH = H, LW = W, R1 = KH, R0 = KW;
  } else if (KIND == kLoomConvGradInput) {
    M = N * HW, cols = Cg, K = (long long)Og * KHKW, LH = OH, LW = OW, R1 = KH, R0 = KW;
  } else {
    const long long S = meta[cm::kSplits];
    n0 = split * N / S;
    M = (long long)Cg * KHKW, cols = Og, K = ((split + 1) * N / S - n0) * OHW, LH = H, LW = W, R1 = OH, R0 = OW;
  }
  const long long m0 = (long long)blockIdx.x * BM;
  const int col0 = (int)blockIdx.y * BN, cols_left = cols - col0;

  // B[k, col] = bbase[ktab_b[k] + col * bstride], col counted from col0.
  const T* bbase;
  long long bstride;
  if (KIND == kLoomConvFwd)
    bstride = K, bbase = Bp + (g * Og + col0) * K;
  else if (KIND == kLoomConvGradInput)
    bstride = KHKW, bbase = Bp + (g * Og * Cg + col0) * (long long)KHKW;
  else
    bstride = OHW, bbase = Bp + (g * Og + col0) * (long long)OHW;
  // vec_b: fwd on the tensor cores reads B (a weight row, contiguous in
  // (c, r, s)) as 16-byte chunks, k in (c, r, s) order. Otherwise fwd and
  // grad_input whose group has a multiple of BK channels to sum (C/G, O/G)
  // take k channel-blocked, k = ((cb KH + r) KW + s) BK + ci for channel
  // cb BK + ci: every slice is one tap (r, s) of BK channels, so whether a
  // row's input position exists is decided once a slice, and the KH KW
  // slices of a channel block come one after the other (their reads of x
  // and w stay in L1). Chunks win over blocked for fwd: blocked, its B is a
  // gather of elements KH KW apart, several times the L1 traffic (defining
  // LOOM_CONV_FWD_BLOCKED to 1 reverses the choice, to time the two). Else
  // k = (channel, r, s), tested element by element.
  const bool blocked_ok = KIND != kLoomConvGradWeight && (KIND == kLoomConvFwd ? Cg : Og) % BK == 0;
  // grad_weight on the tensor cores with unit stride along W and output rows
  // of a multiple of 8 (ResNet's 32, 16, 8) takes both operands 8 k at a
  // time: a chunk of 8 consecutive k is 8 consecutive ow of one (n, oh),
  // 16 aligned bytes of dout and 8 consecutive elements of one row of x
  // (loom_conv_ld8_any, masked where the row's padding falls in), instead
  // of 24 two-byte loads a thread a slice.
  const bool vec_b = KIND == kLoomConvGradWeight
                         ? VEC_B && sW == 1 && OW % 8 == 0 && ((unsigned long long)Bp & 15) == 0
                         : VEC_B && K % 8 == 0 && ((unsigned long long)Bp & 15) == 0 &&
                               !(LOOM_CONV_FWD_BLOCKED && blocked_ok);
  // vec_a: grad_weight's A in chunks of 8 consecutive k, 8 consecutive
  // elements of one row of x (loom_conv_ld8_any, masked where the row's
  // padding falls in), where vec_b holds. (The same chunks along m for fwd
  // and grad_input, 8 consecutive ow of one (n, oh), measured slower: 80
  // against 92 TFLOP/s on ResNet-18's first 3x3 layer, H200; their element
  // loads along m are already coalesced, a chunk's granules are read twice.)
  const bool vec_a = VEC_A && vec_b;
  const bool blocked = blocked_ok && !vec_b;
  // grad_input with a stride: a row (h, w) only sums the taps with r dH = h
  // + pH and s dW = w + pW modulo the strides (its phase). Blocked, the rows
  // go in phase order instead, m = (n, phase (bh, bw), hq, wq) for h = h0(bh)
  // + sH hq, w = w0(bw) + sW wq, so that a block's rows share one phase (or
  // two), and the block's slices are only the taps that hit a phase of its
  // rows: a quarter of them for stride 2.
  const bool phased = KIND == kLoomConvGradInput && blocked && (sH > 1 || sW > 1) && sH * sW <= 32 &&
                      KHKW <= kLoomConvMaxTaps;

  // grad_weight whose group has a multiple of BM input channels (or a 1x1
  // kernel) takes its rows tap-major, m = (r KW + s) C/G + c, so that a
  // block's rows are one tap: whether a k's input position exists is then
  // decided once a slice.
  const bool gw_tap = KIND == kLoomConvGradWeight && (KHKW == 1 || Cg % BM == 0);

  // grad_input's row m: (n, h, w), in phase order when phased.
  auto gi_row = [&](long long m, long long& n, int& h, int& w) {
    n = loom_conv_div(m, HW);
    int r = (int)(m - n * HW);
    if (!phased) {
      h = r / W, w = r - h * W;
      return;
    }
    int bh = 0, h0 = 0, hc = 0, bw = 0, w0 = 0, wc = 0;
    for (; bh < sH; ++bh) {  // the h of phase bh: h0 + sH hq, (h0 + pH) % sH == bh, hc of them
      h0 = ((bh - pH) % sH + sH) % sH, hc = h0 < H ? (H - 1 - h0) / sH + 1 : 0;
      if (r < hc * W) break;
      r -= hc * W;
    }
    for (; bw < sW; ++bw) {
      w0 = ((bw - pW) % sW + sW) % sW, wc = w0 < W ? (W - 1 - w0) / sW + 1 : 0;
      if (r < hc * wc) break;
      r -= hc * wc;
    }
    const int hq = r / wc;
    h = h0 + sH * hq, w = w0 + sW * (r - hq * wc);
  };

  // fwd, grad_input: this thread's P rows m0 + P mq + i of A. A[m, k] =
  // arow[i][off(k)] where the coordinates fall in the plane (and, for
  // grad_input, on the stride grid: phase).
  const int mq = tid % MT;
  const T* arow[P];
  int mah[P], maw[P], mph[P];
#pragma unroll
  for (int i = 0; i < P; ++i) arow[i] = Ap, mah[i] = kLoomConvFar, maw[i] = 0, mph[i] = 0;
  const T* abase = Ap;  // grad_weight: A[m, k] = abase[ktab_a[k] + mtab[m].x]
  if (KIND == kLoomConvFwd || KIND == kLoomConvGradInput) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const long long m = m0 + P * mq + i;
      if (m < M) {
        if (KIND == kLoomConvFwd) {
          const long long n = loom_conv_div(m, OHW);
          const int p = (int)(m - n * OHW), oh = p / OW, ow = p - oh * OW;
          mah[i] = oh * sH - pH, maw[i] = ow * sW - pW;
          arow[i] = Ap + (n * C + g * Cg) * HW + (mah[i] * W + maw[i]);
        } else {
          long long n;
          int h, w;
          gi_row(m, n, h, w);
          const int th = h + pH, tw = w + pW;
          mah[i] = th / sH, maw[i] = tw / sW;
          mph[i] = (th - mah[i] * sH) * sW + (tw - maw[i] * sW);
          arow[i] = Ap + (n * O + g * Og) * OHW + (mah[i] * OW + maw[i]);
        }
      }
    }
  } else {
    abase = Ap + g * Cg * HW;
    if (tid < BM) {
      // A row past M never loads (ah = kFar), but tap-major, where one row
      // tests for all, repeats row M - 1 (loads in bounds, never stored).
      int4 e = make_int4(0, kLoomConvFar, 0, 0);
      if (m0 + tid < M || gw_tap) {
        const int m = (int)(m0 + tid < M ? m0 + tid : M - 1);
        const int c = gw_tap ? m % Cg : m / KHKW, rs = gw_tap ? m / Cg : m - c * KHKW, r = rs / KW, kw = rs - r * KW;
        const int ah = r * dH - pH, aw = kw * dW - pW;
        e = make_int4(c * HW + ah * W + aw, ah, aw, 0);
      }
      mtab[tid] = e;
    }
  }

  if (phased) {
    if (tid == 0) phase_mask = 0;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (mah[i] != kLoomConvFar) atomicOr(&phase_mask, 1u << mph[i]);
    __syncthreads();
    if (tid == 0) {
      int n = 0;
      for (int r = 0; r < KH; ++r)
        for (int s = 0; s < KW; ++s)
          if (phase_mask >> ((r * dH) % sH * sW + (s * dW) % sW) & 1) taps[n++] = make_int2(r, s);
      ntaps = n;
    }
    __syncthreads();
    R1 = 1, R0 = ntaps, K = (long long)Og * ntaps;  // k = (o block, tap, o)
  }

  // The k table of slice kt, by the first BK threads, each for the slice's
  // k number tid: digits (k2, k1, k0) = (channel, r, s), or (sample of the
  // split, oh, ow) for grad_weight, with radices (R1, R0). Slices are built
  // in order, so each thread keeps its digits and steps them from one slice
  // to the next instead of dividing: by BK's digits (s2, s1, s0), a carry
  // out of k1 adding 1 to k2; blocked, by one tap (0, 0, 1), a carry adding
  // BK. In shared memory (kdig[tid], kdig[BK] = {s2, s1, s0, carry}), where
  // they cost the other warps no registers.
  if (tid <= BK) {
    if (blocked) {
      kdig[tid] = tid < BK ? make_int4(tid, 0, 0, 0) : make_int4(0, 0, 1, BK);
    } else {
      const int r10 = R1 * R0, k2 = tid / r10, k1 = (tid - k2 * r10) / R0, k0 = tid - k2 * r10 - k1 * R0;
      kdig[tid] = make_int4(k2, k1, k0, 1);
    }
  }
  auto build = [&](int kt, int buf) {
    if (tid < BK) {
      int4 d = kdig[tid];
      int &k2 = d.x, &k1 = d.y, &k0 = d.z;
      if (kt > 0) {
        const int4 st = kdig[BK];
        k0 += st.z;
        if (k0 >= R0) k0 -= R0, ++k1;
        k1 += st.y;
        if (k1 >= R1) k1 -= R1, k2 += st.w;
        k2 += st.x;
        kdig[tid] = d;
      }
      int4 e = make_int4(0, -kLoomConvFar, -kLoomConvFar, -1);
      long long ao = 0, bo = 0;
      if ((long long)kt * BK + tid < K) {
        if (KIND == kLoomConvFwd) {  // (c, r, s)
          e = make_int4(k2 * HW + k1 * dH * W + k0 * dW, -k1 * dH, -k0 * dW, 0);
          bo = (long long)k2 * KHKW + k1 * KW + k0;
        } else if (KIND == kLoomConvGradInput) {  // (o, r, s), phased (o, tap); r dH = ch sH + dh
          const int2 rs = phased ? taps[k0] : make_int2(k1, k0);
          const int rd = rs.x * dH, sd = rs.y * dW;
          const int ch = sH == 1 ? rd : rd / sH, cw = sW == 1 ? sd : sd / sW;
          e = make_int4(k2 * OHW - ch * OW - cw, ch, cw, (rd - ch * sH) * sW + (sd - cw * sW));
          bo = (long long)k2 * Cg * KHKW + rs.x * KW + rs.y;
        } else {  // (sample of the split, oh, ow)
          const long long n = n0 + k2;
          e = make_int4(0, -k1 * sH, -k0 * sW, 0);
          ao = n * C * HW + (long long)k1 * sH * W + (long long)k0 * sW;
          bo = n * O * OHW + (long long)k1 * OW + k0;
        }
      }
      ktab[buf][tid] = e;
      ktab_a[buf][tid] = ao;
      ktab_b[buf][tid] = bo;
    }
  };

  // Slice kt from global memory into registers (k table `buf`). B's
  // lanes walk k (columns tid / KT + (NT / KT) j: bcol + j bstep), but for
  // grad_input, whose weight rows w[o][c][.] are KH KW apart along k and
  // contiguous along the column c: there they walk the columns (column
  // tid % BN: bcl), each thread taking the k pairs tid / BN + (NT / BN) j.
  enum : int { B_ALONG_COL = KIND == kLoomConvGradInput };
  static_assert((NT / BN) * (L::BJ / P) * P == BK, "conv gather of B along its columns");
  const T* const bcl = loom_conv_opaque(bbase + (tid % BN) * bstride);
  const bool cok = tid % BN < cols_left;
  const T* const bcol = bbase + (tid / KT) * bstride;
  const long long bstep = (NT / KT) * bstride;
  // B's columns j < bcols exist
  const int bcols = cols_left - tid / KT <= 0 ? 0 : (cols_left - tid / KT + NT / KT - 1) / (NT / KT);
  LoomConvRegs<T, L::AJ> ra;
  LoomConvRegs<T, L::BJ> rb;  // with vec_b, rb.v holds the chunk
  const int kq = tid % KT;    // this thread's k group (A along k, B): k = P kq + i
  // grad_weight's A with vec_a, two chunks of 8 a thread: rows tid / 4 and
  // 64 + tid / 4, k 8 (tid % 4) on. A chunk's 8 k are one (n, oh): its row
  // of x exists or not as a whole, and its columns iw0 .. iw0 + 7 are
  // consecutive; where the chunk's granules might leave x (its first and
  // last elements), an element at a time.
  static_assert(!VEC_A || (L::AJ == 16 && BM == 128 && BK == 32 && NT == 256), "two chunks of 8 a thread");
  const T* const a_end = Ap + N * C * (long long)HW;
  auto load8 = [&](const T* p, int iw0, unsigned (&q)[4]) {
    const unsigned long long pa = (unsigned long long)p & ~15ull;
    if (pa >= (unsigned long long)Ap && pa + 32 <= (unsigned long long)a_end) {
      const uint4 v = loom_conv_ld8_any(reinterpret_cast<const unsigned short*>(p));
      q[0] = v.x, q[1] = v.y, q[2] = v.z, q[3] = v.w;
      if (iw0 < 0 || iw0 + 8 > LW)  // the row's padding: zeros
#pragma unroll
        for (int i = 0; i < 4; ++i)
          q[i] &= ((unsigned)(iw0 + 2 * i) < (unsigned)LW ? 0xffffu : 0u) |
                  ((unsigned)(iw0 + 2 * i + 1) < (unsigned)LW ? 0xffff0000u : 0u);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        if ((unsigned)(iw0 + i) < (unsigned)LW)
          q[i / 2] |= (unsigned)reinterpret_cast<const unsigned short*>(p)[i] << (16 * (i % 2));
    }
  };
  auto gather_a_chunks = [&](int buf) {
    if constexpr (!VEC_A) return;
    const int kc = (tid % 4) * 8;
    const int4 e = ktab[buf][kc];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      unsigned q[4] = {0, 0, 0, 0};
      const int4 me = mtab[tid / 4 + 64 * j];
      if ((unsigned)me.y - (unsigned)e.y < (unsigned)LH) load8(abase + ktab_a[buf][kc] + me.x, me.z - e.z, q);
#pragma unroll
      for (int i = 0; i < 4; ++i) ra.v[4 * j + i] = q[i];
    }
  };
  auto gather = [&](int kt, int buf) {
    if constexpr (!L::A_ALONG_K) {
      if (blocked) {  // one tap for the whole slice: one test a row
        const int4 e = ktab[buf][0];
        bool ok[P];
#pragma unroll
        for (int i = 0; i < P; ++i)
          ok[i] = (unsigned)mah[i] - (unsigned)e.y < (unsigned)LH && (unsigned)maw[i] - (unsigned)e.z < (unsigned)LW &&
                  (KIND != kLoomConvGradInput || e.w == mph[i]);
#pragma unroll
        for (int j = 0; j < L::AJ / P; ++j) {
          const int off = ktab[buf][tid / MT + (NT / MT) * j].x;
#pragma unroll
          for (int i = 0; i < P; ++i) ra.set(j * P + i, ok[i] ? __ldg(arow[i] + off) : T(0));
        }
      } else {  // a test an element
#pragma unroll
        for (int j = 0; j < L::AJ / P; ++j) {
          const int4 e = ktab[buf][tid / MT + (NT / MT) * j];
#pragma unroll
          for (int i = 0; i < P; ++i) {
            const bool ok = (unsigned)mah[i] - (unsigned)e.y < (unsigned)LH &&
                            (unsigned)maw[i] - (unsigned)e.z < (unsigned)LW &&
                            (KIND != kLoomConvGradInput || e.w == mph[i]);
            ra.set(j * P + i, ok ? __ldg(arow[i] + e.x) : T(0));
          }
        }
      }
    } else if (VEC_A && vec_a) {
      gather_a_chunks(buf);
    } else {
      int4 e[P];
      const T* ak[P];
#pragma unroll
      for (int i = 0; i < P; ++i) e[i] = ktab[buf][P * kq + i], ak[i] = loom_conv_opaque(abase + ktab_a[buf][P * kq + i]);
      if (gw_tap) {  // one tap for the block's rows: one test a k
        const int4 me = mtab[0];
        bool ok[P];
#pragma unroll
        for (int i = 0; i < P; ++i)
          ok[i] = (unsigned)me.y - (unsigned)e[i].y < (unsigned)LH && (unsigned)me.z - (unsigned)e[i].z < (unsigned)LW;
#pragma unroll
        for (int j = 0; j < L::AJ / P; ++j) {
          const int off = mtab[tid / KT + (NT / KT) * j].x;
#pragma unroll
          for (int i = 0; i < P; ++i) ra.set(j * P + i, ok[i] ? __ldg(ak[i] + off) : T(0));
        }
      } else {  // a test an element
#pragma unroll
        for (int j = 0; j < L::AJ / P; ++j) {
          const int4 me = mtab[tid / KT + (NT / KT) * j];
#pragma unroll
          for (int i = 0; i < P; ++i) {
            const bool ok = (unsigned)me.y - (unsigned)e[i].y < (unsigned)LH &&
                            (unsigned)me.z - (unsigned)e[i].z < (unsigned)LW;
            ra.set(j * P + i, ok ? __ldg(ak[i] + me.x) : T(0));
          }
        }
      }
    }
    const long long kb = (long long)kt * BK;
    if constexpr (VEC_B) {
      if (vec_b) {
        static_assert(sizeof(rb.v) == 16, "one 16-byte chunk of B a thread");
        const int cl = tid / 4, kc = (tid % 4) * 8;
        uint4 q = make_uint4(0, 0, 0, 0);
        if (cl < cols_left && kb + kc < K)
          q = __ldg(reinterpret_cast<const uint4*>(KIND == kLoomConvGradWeight ? bbase + cl * bstride + ktab_b[buf][kc]
                                                                               : bbase + cl * K + kb + kc));
        rb.v[0] = q.x, rb.v[1] = q.y, rb.v[2] = q.z, rb.v[3] = q.w;
        return;
      }
    }
    const int kleft = K - kb < BK ? (int)(K - kb) : BK;
    if constexpr (B_ALONG_COL) {
#pragma unroll
      for (int j = 0; j < L::BJ / P; ++j) {
        const int kp = P * (tid / BN + (NT / BN) * j);
        const long long* bo = &ktab_b[buf][kp];
#pragma unroll
        for (int i = 0; i < P; ++i) rb.set(j * P + i, cok && kp + i < kleft ? __ldg(bcl + bo[i]) : T(0));
      }
    } else {
      bool kok[P];
      const T* bk[P];
#pragma unroll
      for (int i = 0; i < P; ++i) kok[i] = P * kq + i < kleft, bk[i] = loom_conv_opaque(bcol + ktab_b[buf][P * kq + i]);
#pragma unroll
      for (int j = 0; j < L::BJ / P; ++j) {
#pragma unroll
        for (int i = 0; i < P; ++i) rb.set(j * P + i, kok[i] && j < bcols ? __ldg(bk[i] + j * bstep) : T(0));
      }
    }
  };

  T* const As0 = (T*)smem;
  T* const Bs0 = As0 + 2 * L::A_ELEMS;
  // The registers into shared buffer `buf`.
  auto store = [&](int buf) {
    T* As = As0 + buf * L::A_ELEMS;
    T* Bs = Bs0 + buf * L::B_ELEMS;
    if (VEC_A && vec_a) {
      if constexpr (VEC_A) {
#pragma unroll
        for (int j = 0; j < 2; ++j)  // m-major [BM][LDA]
          *reinterpret_cast<uint4*>(As + (tid / 4 + 64 * j) * L::LDA + (tid % 4) * 8) =
              make_uint4(ra.v[4 * j], ra.v[4 * j + 1], ra.v[4 * j + 2], ra.v[4 * j + 3]);
      }
    } else if constexpr (!L::A_ALONG_K) {
#pragma unroll
      for (int j = 0; j < L::AJ / P; ++j) ra.put(As + (tid / MT + (NT / MT) * j) * L::LDA + P * mq, j);
    } else {
#pragma unroll
      for (int j = 0; j < L::AJ / P; ++j) {
        const int mj = tid / KT + (NT / KT) * j;
        ra.put(L::A_MMAJOR ? As + mj * L::LDA + P * kq : As + kq * L::LDA + mj, j);  // P == 1 unless A_MMAJOR
      }
    }
    if constexpr (VEC_B) {
      if (vec_b) {
        *reinterpret_cast<uint4*>(Bs + (tid / 4) * L::LDB + (tid % 4) * 8) = make_uint4(rb.v[0], rb.v[1], rb.v[2], rb.v[3]);
        return;
      }
    }
    if constexpr (B_ALONG_COL) {
#pragma unroll
      for (int j = 0; j < L::BJ / P; ++j) {
        const int kp = P * (tid / BN + (NT / BN) * j), cl = tid % BN;
        rb.put(L::MMA ? Bs + cl * L::LDB + kp : Bs + kp * L::LDB + cl, j);  // P == 1 unless MMA
      }
    } else {
#pragma unroll
      for (int j = 0; j < L::BJ / P; ++j) {
        const int cl = tid / KT + (NT / KT) * j;
        rb.put(L::MMA ? Bs + cl * L::LDB + P * kq : Bs + kq * L::LDB + cl, j);  // P == 1 unless MMA
      }
    }
  };

  LoomConvEngine<Tr, KIND> eng;
  eng.zero();
  const int KTILES = (int)((K + BK - 1) / BK);
  if (KTILES > 0) {
    build(0, 0);
    __syncthreads();
    gather(0, 0);
    store(0);
    if (KTILES > 1) build(1, 1);
    __syncthreads();
    for (int kt = 0; kt < KTILES; ++kt) {
      const int cur = kt & 1;
      if (kt + 1 < KTILES) gather(kt + 1, cur ^ 1);  // in flight while the tensor cores / FMAs work
      eng.compute(As0 + cur * L::A_ELEMS, Bs0 + cur * L::B_ELEMS);
      if (kt + 1 < KTILES) {
        store(cur ^ 1);
        if (kt + 2 < KTILES) build(kt + 2, cur);  // table `cur` was last read by gather(kt), before the last barrier
      }
      __syncthreads();
    }
  }

  // Epilogue, through shared memory: out[ooff + col * ostride] for this
  // thread's row m0 + mrow, col counted from col0 (worked out here rather
  // than kept in registers through the loop). When every output plane is a
  // multiple of 16 bytes (and the buffer 16-byte aligned), a thread stores
  // V consecutive rows of a column at once; otherwise a warp stores 32
  // consecutive rows of a column, one element each.
  enum : int { V = Out::V, VG = BM / V };
  typename Out::type* const out = (typename Out::type*)bufs[meta[cm::kOut]];
  typename Out::type* optr;
  long long ostride;
  if (KIND == kLoomConvFwd)
    ostride = OHW, optr = out + (g * Og + col0) * (long long)OHW;
  else if (KIND == kLoomConvGradInput)
    ostride = HW, optr = out + (g * Cg + col0) * (long long)HW;
  else
    ostride = M, optr = out + (split * O + g * Og + col0) * M;
  const bool vec_out = !phased && !(gw_tap && KHKW > 1) && ostride % V == 0 && ((unsigned long long)out & 15) == 0;
  const int mrow = vec_out ? (tid % VG) * V : tid % BM;
  const bool mvalid = m0 + mrow < M;
  long long ooff = 0;
  if (KIND == kLoomConvGradWeight) {
    const int m = (int)(m0 + mrow);
    ooff = gw_tap ? (long long)(m % Cg) * KHKW + m / Cg : m;
  } else if (KIND == kLoomConvFwd) {
    const long long n = loom_conv_div(m0 + mrow, ostride);
    ooff = n * O * ostride + (m0 + mrow - n * ostride);
  } else if (KIND == kLoomConvGradInput && mvalid) {
    long long n;
    int h, w;
    gi_row(m0 + mrow, n, h, w);
    ooff = n * C * HW + h * W + w;
  }
  Acc* const Cs = (Acc*)smem;
#pragma unroll
  for (int pass = 0; pass < BN / L::CH; ++pass) {
    if (pass > 0) __syncthreads();
    eng.stage(Cs, pass);
    __syncthreads();
    if (vec_out) {
#pragma unroll
      for (int j = 0; j < L::CH / (NT / VG); ++j) {
        const int cl = tid / VG + (NT / VG) * j, col = pass * L::CH + cl;
        if (mvalid && col < cols_left) Out::store_vec(optr + ooff + col * ostride, Cs + cl * L::LDC + mrow);
      }
    } else {
#pragma unroll 4
      for (int j = 0; j < L::CH / (NT / BM); ++j) {
        const int cl = tid / BM + (NT / BM) * j, col = pass * L::CH + cl;
        if (mvalid && col < cols_left) optr[ooff + col * ostride] = Out::cvt(Cs[cl * L::LDC + mrow]);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Entry points.

static_assert(loom::kernels::cuda::meta_layout::conv::kThreads == 256, "conv entry points are written for 256 threads");

// MIN_BLOCKS: 2 resident blocks an SM (at most 128 registers a thread) for
// the tensor-core kernels; the FMA tiles of f32 / f64 take what they need.
// Each kernel is a module of its own at run time (library.cpp
// conv_function_source defines LOOM_CONV_ONLY as one LOOM_CONV_ENTRY);
// without it, all twelve (the source test compiles them).
#define LOOM_CONV_ENTRY(OP, SUFFIX, TRAITS, MIN_BLOCKS, KIND)                                               \
  extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS)                                             \
      loom_conv2d_##OP##_##SUFFIX(LOOM_CONV_PARAMS) {                                                       \
    loom_conv_run<TRAITS, KIND>(bufs, is, meta);                                                            \
  }
#define LOOM_CONV_ENTRIES(SUFFIX, TRAITS, MIN_BLOCKS)                        \
  LOOM_CONV_ENTRY(fwd, SUFFIX, TRAITS, MIN_BLOCKS, kLoomConvFwd)             \
  LOOM_CONV_ENTRY(grad_input, SUFFIX, TRAITS, MIN_BLOCKS, kLoomConvGradInput) \
  LOOM_CONV_ENTRY(grad_weight, SUFFIX, TRAITS, MIN_BLOCKS, kLoomConvGradWeight)

#ifdef LOOM_CONV_ONLY
LOOM_CONV_ONLY
#else
LOOM_CONV_ENTRIES(f32, LoomConvF32, 1)
LOOM_CONV_ENTRIES(f64, LoomConvF64, 1)
LOOM_CONV_ENTRIES(bf16, LoomConvBf16, 2)
LOOM_CONV_ENTRIES(f16, LoomConvF16, 2)
#endif
