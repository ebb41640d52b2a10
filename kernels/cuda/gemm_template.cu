// The tiled matrix product that every GEMM kernel instantiates (jit/cuda/gemm.cpp
// emits the instantiation, jit/cuda/kernel_emitter.cpp the epilogue). Compiled only
// by NVRTC, after the prelude, never by the host compiler.
//
//   C[b, m, n] = sum over k of A[b, m, k] * B[b, k, n], then epi(b, m, n, C)
//
// A block computes a BM x BN tile of C. K is walked in BK-wide slices that
// cp.async copies into STAGES shared-memory buffers, so the copy of slice
// k+STAGES-1 overlaps the arithmetic on slice k. Each operand is stored in
// shared memory with its contiguous global dimension contiguous, so every
// copy is one 16-byte cp.async (VEC: the fast path) or, for any other
// strides or alignment, one element-wide cp.async (the general path).
// Out-of-range elements are zero-filled by the copy itself (src-size 0),
// so edges need no other branch until the epilogue.
//
// Arithmetic, two kinds:
// - FFMA (exact float32 / float64): thread tile P x Q (4 or 8 each) in
//   registers; per slice of V = 16/sizeof(T) k-steps each thread reads its
//   A and B fragments with 16-byte shared loads and does V*P*Q fused
//   multiply-adds. Rows and columns of a thread are 4-wide groups when the
//   operand's tile is k-major (the 4 values are adjacent: one 16-byte load)
//   and a stride-(threads) comb when it is m/n-major (the V k-values of one
//   row are adjacent; neighbouring threads' rows land in different banks).
// - MMA (float32 inputs rounded to TF32, only when the user allows it):
//   P x Q warps, each a (BM/P) x (BN/Q) tile of m16n8k8 mma.sync.
// The epilogue runs per element of C, bounds-checked: FFMA tiles first go
// through shared memory so that a warp's elements are adjacent in a row.
//
// LoomGemmBf16 (end of file) is the same block for bfloat16 operands on
// m16n8k16 tensor cores, fragments read with ldmatrix, float accumulators.
typedef long long loom_i64;

struct LoomGemmArgs {
  loom_i64 M, N, K;
  loom_i64 a_m, a_k, a_b;  // element strides of A along m, k, batch
  loom_i64 b_k, b_n, b_b;  // of B along k, n, batch
};

__device__ __forceinline__ unsigned loom_smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
// 16 bytes, of which `bytes` are read from global memory; the rest are zeros.
__device__ __forceinline__ void loom_cp16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(loom_smem_addr(dst)), "l"(src), "r"(bytes));
}
template <int S>
__device__ __forceinline__ void loom_cp_elem(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(loom_smem_addr(dst)), "l"(src), "n"(S), "r"(bytes));
}
__device__ __forceinline__ void loom_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void loom_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ float loom_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double loom_fma(double a, double b, double c) { return __fma_rn(a, b, c); }

// N consecutive elements (16-byte aligned) from shared memory.
template <int N>
__device__ __forceinline__ void loom_lds(float* d, const float* s) {
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    const float4 v = *reinterpret_cast<const float4*>(s + i);
    d[i] = v.x, d[i + 1] = v.y, d[i + 2] = v.z, d[i + 3] = v.w;
  }
}
template <int N>
__device__ __forceinline__ void loom_lds(double* d, const double* s) {
#pragma unroll
  for (int i = 0; i < N; i += 2) {
    const double2 v = *reinterpret_cast<const double2*>(s + i);
    d[i] = v.x, d[i + 1] = v.y;
  }
}

// What a plain epilogue (a store of the sum) loads: nothing.
struct LoomNoLoads {};

// An operand without fused producers (ir::Contraction::a_value): its
// elements are multiplied as they are. Otherwise the generated kernel
// passes a lambda, applied once to each in-bounds element of a landed
// slice (LoomTileCopies::apply, LoomGemm::prepare).
struct LoomRawOperand {};
template <class Op> struct loom_is_raw { enum { value = 0 }; };
template <> struct loom_is_raw<LoomRawOperand> { enum { value = 1 }; };

// op on the first `valid` elements of a 16-byte chunk in shared memory (the
// rest is zero fill past an edge, and stays zero).
template <class T, class Op>
__device__ __forceinline__ void loom_apply_chunk(T* at, int valid, Op op) {
  enum { V = 16 / (int)sizeof(T) };
  T v[V];
  loom_lds<V>(v, at);
#pragma unroll
  for (int e = 0; e < V; ++e)
    if (e < valid) v[e] = op(v[e]);
  if constexpr (V == 4) *reinterpret_cast<float4*>(at) = make_float4(v[0], v[1], v[2], v[3]);
  else *reinterpret_cast<double2*>(at) = make_double2(v[0], v[1]);
}

// Four adjacent elements to shared memory (16-byte aligned for float,
// 32 for double): one or two vector stores.
__device__ __forceinline__ void loom_sts4(float* d, float a, float b, float c, float e) {
  *reinterpret_cast<float4*>(d) = make_float4(a, b, c, e);
}
__device__ __forceinline__ void loom_sts4(double* d, double a, double b, double c, double e) {
  reinterpret_cast<double2*>(d)[0] = make_double2(a, b);
  reinterpret_cast<double2*>(d)[1] = make_double2(c, e);
}

__device__ __forceinline__ unsigned loom_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// The product narrowed to the K range [kb, kb + len): A and B moved to its
// start, g.K its length (0 for a range past K).
template <class T>
__device__ __forceinline__ void loom_gemm_k_range(const T*& A, const T*& B, LoomGemmArgs& g, loom_i64 kb, loom_i64 len) {
  A += kb * g.a_k;
  B += kb * g.b_k;
  g.K = g.K - kb <= 0 ? 0 : g.K - kb < len ? g.K - kb : len;
}

// Split-K: with kchunk > 0, block row blockIdx.y computes the K range
// [y * kchunk, (y + 1) * kchunk) only (a last range may be short or empty).
template <class T>
__device__ __forceinline__ void loom_gemm_split(const T*& A, const T*& B, LoomGemmArgs& g, loom_i64 kchunk) {
  if (kchunk > 0) loom_gemm_k_range(A, B, g, (loom_i64)blockIdx.y * kchunk, kchunk);
}

// The BM x BN tile of C that block blockIdx.x computes. Blocks go down
// groups of 8 tile rows column by column, so the blocks resident together
// read the same few A row panels and B column panels, which then stay in L2.
__device__ __forceinline__ void loom_gemm_tile(loom_i64 M, loom_i64 N, int BM, int BN, loom_i64& m0, loom_i64& n0) {
  const loom_i64 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const loom_i64 pid = blockIdx.x, group = 8 * tiles_n, first_m = (pid / group) * 8;
  const loom_i64 group_m = tiles_m - first_m < 8 ? tiles_m - first_m : 8;
  m0 = (first_m + (pid % group) % group_m) * BM;
  n0 = ((pid % group) / group_m) * BN;
}

// Where a block starts: its split-K range (loom_gemm_split), its tile
// (m0, n0: loom_gemm_tile) and its batch (returned), with A and B moved to
// that batch's operands.
template <class T>
__device__ __forceinline__ loom_i64 loom_gemm_block(const T*& A, const T*& B, LoomGemmArgs& g, loom_i64 kchunk, int BM,
                                                    int BN, loom_i64& m0, loom_i64& n0) {
  loom_gemm_split(A, B, g, kchunk);
  loom_gemm_tile(g.M, g.N, BM, BN, m0, n0);
  const loom_i64 batch = blockIdx.z;
  A += batch * g.a_b;
  B += batch * g.b_b;
  return batch;
}

// The pipelined main loop of both GEMM structs: STAGES - 1 slices copied
// ahead, then per slice kt: wait for its copy, barrier (every thread is done
// with the stage the next copy overwrites, and plain shared stores of a
// copy are visible), start the copy of slice kt + STAGES - 1, compute on kt.
// fill(stage, k0) copies the slice at k0 into `stage`; land(stage, k0)
// runs once the thread's own copies of it are complete, before the
// barrier; compute(stage, k0) uses it.
template <int STAGES, class T, class Fill, class Land, class Compute>
__device__ __forceinline__ void loom_gemm_pipeline(T* smem, int stage_elems, loom_i64 KT, int bk, Fill&& fill,
                                                   Land&& land, Compute&& compute) {
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) fill(smem + s * stage_elems, (loom_i64)s * bk);
    loom_cp_commit();
  }
  int rd = 0, wr = STAGES - 1;  // stages of slice kt and of slice kt + STAGES - 1
  for (loom_i64 kt = 0; kt < KT; ++kt) {
    loom_cp_wait<STAGES - 2>();
    land(smem + rd * stage_elems, kt * bk);
    __syncthreads();
    const loom_i64 next = kt + STAGES - 1;
    if (next < KT) fill(smem + wr * stage_elems, next * bk);
    loom_cp_commit();
    compute(smem + rd * stage_elems, kt * bk);
    rd = rd + 1 == STAGES ? 0 : rd + 1;
    wr = wr + 1 == STAGES ? 0 : wr + 1;
  }
  loom_cp_wait<0>();
}

// Where element (r, k) of a k-contiguous [R][BK] tile lives in the
// warp-tiled loop (LoomGemm::A_ROWS / B_ROWS): row r's 16-byte chunk k / V
// at chunk (k / V) ^ (r / 4) of its row. A warp's fragment load reads one
// chunk of 8 rows 4 apart (A) or of 4 rows 4 apart (B); unswizzled, rows
// of BK = 32 floats put all of them in the same four banks.
template <int BK, int V>
__device__ __forceinline__ int loom_swizzled(int r, int k) {
  return r * BK + ((((k / V) ^ (r >> 2)) & (BK / V - 1)) * V) + k % V;
}

// The copies of one operand's slices into its shared tiles, planned once
// per block. Working out every chunk's position, bounds and 64-bit address
// again for every slice cost the bfloat16 kernel ~6 instructions per mma on
// an H100 and left its tensor pipe a third busy. Here a thread's chunks
// share one coordinate and step by a fixed stride along the other, so a
// slice costs a pointer add, a bound and a cp.async per chunk.
//
// LoomTileCopies: 16-byte chunks (V elements along the operand's
// contiguous dim, which has stride 1) of R rows by BK into a tile stored
// [BK][LD] when KM (rows contiguous) or [R][LD] otherwise; `usable` says
// whether the chunks divide evenly over the threads as planned. SWZ: the
// [R][BK] tile of the warp-tiled loop, its chunks placed by loom_swizzled
// (LD = BK).
template <class T, int THREADS, int BK, int R, bool KM, int LD, bool SWZ = false>
struct LoomTileCopies {
  enum {
    V = 16 / (int)sizeof(T),
    CR = KM ? R / V : R,     // chunks along the rows
    CK = KM ? BK : BK / V,   // chunks along k
    FIXED = KM ? CR : CK,    // chunks along the contiguous dim: each thread keeps one
    MOVE = THREADS / FIXED,  // the other coordinate's step from one chunk of a thread to the next
    N = CR * CK / THREADS,   // chunks per thread
  };
  static constexpr bool usable =
      (CR * CK) % THREADS == 0 && THREADS % FIXED == 0 && (!SWZ || (!KM && LD == BK));
  const T* base;      // the operand: the address an empty copy names
  const T* p;         // the thread's first chunk at k = 0
  loom_i64 step;      // elements from one of its chunks to the next
  loom_i64 s_k;       // the operand's stride along k
  int dst;            // the first chunk's place in a tile
  int lead, first;    // its fixed coordinate (row offset if KM, else k offset) and its moving one
  loom_i64 room;      // KM: rows that exist from the thread's row on; else rows past r0
  // tid: the thread's index among the THREADS that copy the tile.
  __device__ __forceinline__ LoomTileCopies(const T* src, loom_i64 rows, loom_i64 r0, loom_i64 s_r, loom_i64 sk,
                                            unsigned tid = threadIdx.x) {
    const int fixed = (tid % FIXED) * V, moving = tid / FIXED;
    base = src, s_k = sk, lead = fixed, first = moving;
    dst = moving * LD + fixed;
    if (KM) {  // a chunk: V rows at k = first + i * MOVE
      p = src + (r0 + fixed) * s_r + (loom_i64)moving * sk;
      step = (loom_i64)MOVE * sk;
      room = rows - (r0 + fixed);
    } else {   // a chunk: V k of row first + i * MOVE
      p = src + (r0 + moving) * s_r + (loom_i64)fixed * sk;
      step = (loom_i64)MOVE * s_r;
      room = rows - r0;
    }
  }
  // Slice [k0, k0 + BK) into `tile`. A chunk cut by an edge reads its valid
  // part; the copy zero-fills the rest.
  __device__ __forceinline__ void copy(T* tile, loom_i64 k0, loom_i64 K) const {
    const T* q = p + k0 * s_k;
    if (KM) {
      const int rv = room <= 0 ? 0 : room >= V ? V : (int)room;
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int bytes = k0 + first + i * MOVE < K ? rv * (int)sizeof(T) : 0;
        loom_cp16(tile + dst + i * MOVE * LD, bytes ? q + i * step : base, bytes);
      }
    } else {
      const loom_i64 kroom = K - (k0 + lead);
      const int kv = kroom <= 0 ? 0 : kroom >= V ? V : (int)kroom;
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int bytes = first + i * MOVE < room ? kv * (int)sizeof(T) : 0;
        T* to = SWZ ? tile + loom_swizzled<BK, V>(first + i * MOVE, lead) : tile + dst + i * MOVE * LD;
        loom_cp16(to, bytes ? q + i * step : base, bytes);
      }
    }
  }
  // An operand's fused producers on the valid elements of the chunks this
  // thread copied for slice k0, once its own copies have landed (after its
  // cp.async wait, before the barrier that shows them to the block): no
  // barrier and no index arithmetic of their own. The same chunks and
  // bounds as copy(), written out again: one walker shared by both made
  // copy()'s code differ in 10 of 21 test modules (cubins compared), which
  // the GPU did not get to time.
  template <class Op>
  __device__ __forceinline__ void apply(T* tile, loom_i64 k0, loom_i64 K, Op op) const {
    if (KM) {
      const int rv = room <= 0 ? 0 : room >= V ? V : (int)room;
#pragma unroll
      for (int i = 0; i < N; ++i)
        if (k0 + first + i * MOVE < K) loom_apply_chunk(tile + dst + i * MOVE * LD, rv, op);
    } else {
      const loom_i64 kroom = K - (k0 + lead);
      const int kv = kroom <= 0 ? 0 : kroom >= V ? V : (int)kroom;
#pragma unroll
      for (int i = 0; i < N; ++i)
        if (first + i * MOVE < room)
          loom_apply_chunk(SWZ ? tile + loom_swizzled<BK, V>(first + i * MOVE, lead) : tile + dst + i * MOVE * LD, kv, op);
    }
  }
};

// LoomTransposedCopies: element copies of a k-contiguous operand into a
// k-major tile [BK][LD] (the warp-tiled float32 loop), 8 lanes along k and
// THREADS / 8 rows per pass, as LoomGemm::load_transposed, planned.
template <class T, int THREADS, int BK, int R, int LD>
struct LoomTransposedCopies {
  enum { TR = THREADS / 8, PASSES = R / TR, KS = BK / 8 };
  static constexpr bool usable = THREADS % 8 == 0 && R % TR == 0 && BK % 8 == 0;
  const T* base;
  const T* p;          // the thread's first element at k = 0
  loom_i64 row_step;   // TR rows
  loom_i64 s_k;
  int dst, kl, rl;
  loom_i64 room;       // rows past r0
  __device__ __forceinline__ LoomTransposedCopies(const T* src, loom_i64 rows, loom_i64 r0, loom_i64 s_r, loom_i64 sk,
                                                  unsigned tid = threadIdx.x) {
    kl = tid % 8, rl = tid / 8;
    base = src, s_k = sk;
    p = src + (r0 + rl) * s_r + (loom_i64)kl * sk;
    row_step = (loom_i64)TR * s_r;
    dst = kl * LD + rl;
    room = rows - r0;
  }
  __device__ __forceinline__ void copy(T* tile, loom_i64 k0, loom_i64 K) const {
    const T* q = p + k0 * s_k;
#pragma unroll
    for (int j = 0; j < KS; ++j) {
      const bool kok = k0 + kl + 8 * j < K;
#pragma unroll
      for (int r = 0; r < PASSES; ++r) {
        const bool ok = kok && rl + r * TR < room;
        loom_cp_elem<sizeof(T)>(tile + dst + 8 * j * LD + r * TR, ok ? q + r * row_step + 8 * j * s_k : base,
                                ok ? (int)sizeof(T) : 0);
      }
    }
  }
  // As LoomTileCopies::apply, element by element.
  template <class Op>
  __device__ __forceinline__ void apply(T* tile, loom_i64 k0, loom_i64 K, Op op) const {
#pragma unroll
    for (int j = 0; j < KS; ++j) {
      const bool kok = k0 + kl + 8 * j < K;
#pragma unroll
      for (int r = 0; r < PASSES; ++r)
        if (kok && rl + r * TR < room) {
          T* at = tile + dst + 8 * j * LD + r * TR;
          *at = op(*at);
        }
    }
  }
};

// The accumulators: a P x Q thread tile (FFMA) or MI x NI mma fragments.
template <class T, bool MMA, int P, int Q, int MI, int NI>
struct LoomGemmAcc {
  typedef T type[P][Q];
  static __device__ __forceinline__ void zero(type& a) {
#pragma unroll
    for (int i = 0; i < P; ++i)
#pragma unroll
      for (int j = 0; j < Q; ++j) a[i][j] = 0;
  }
};
template <class T, int P, int Q, int MI, int NI>
struct LoomGemmAcc<T, true, P, Q, MI, NI> {
  typedef float type[MI][NI][4];
  static __device__ __forceinline__ void zero(type& a) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) a[i][j][q] = 0.f;
  }
};

// AK: A's tile is k-major ([BK][BM], A contiguous along m), else m-major
// ([BM][BK]); BKM: B's tile is k-major ([BK][BN], B contiguous along n),
// else n-major. AV/BV: 16-byte copies are allowed (contiguous dim stride 1,
// the other strides and the offset multiples of V, the base aligned).
//
// WT (warp-tiled FFMA, float32): an operand contiguous along m/n is stored
// k-major ([BK][BM+4] / [BK][BN+4]); one contiguous along k is stored as
// it is, [BM][BK] / [BN][BK] swizzled (loom_swizzled), when 16-byte copies
// are allowed (A_ROWS / B_ROWS), and otherwise transposed into a k-major
// tile by element copies (8 lanes along k, 4 along m/n, so a warp reads 4
// full 32-byte sectors and writes 32 distinct banks). Each warp owns a
// (8P) x (4Q) sub-tile: lane = 4 * lm + ln, thread rows wm + 32 * (i / 4) +
// 4 * lm + i % 4 (P/4 fragments of 4 rows), columns likewise with 16 and
// ln. A k-major fragment is one 16-byte load of 4 rows (columns) at one k,
// a swizzled one of 4 k of one row (column): the same loads per k. With
// both tiles k-major, fragments for step k+1 are loaded while step k's
// FMAs run (two register sets); otherwise 4 k at a time (wt_slice_rows).
// ROWS: whether the configuration may keep operands as rows at all
// (jit/cuda/gemm.cpp, gemm_row_tiles, decides, and sizes shared memory by
// the same rule).
//
// Split-K: with kchunk > 0, block row blockIdx.y computes the K range
// [y * kchunk, (y + 1) * kchunk) only; the caller's epilogue writes the
// partial sums to a workspace and LoomGemmReduce adds them up in split order
// and applies the real epilogue.
//
// KG > 1 (warp-tiled FFMA only): K split inside the block. KG groups of
// THREADS threads, each the whole tile over its own K range (whole slices)
// with its own pipeline stages, all in step (one barrier); at the end the
// groups' tiles meet in shared memory and are added in group order, once
// per element, before the epilogue. Why: a product with few output tiles
// (W4's 256 x 1024, 128 blocks of 64 x 32) gives each SM one block of 4
// warps, too few to hide the latency of its loads and FMA chains; split-K
// across blocks hides it but pays a reduce kernel and a workspace pass.
template <class T, int BM, int BN, int BK, int P, int Q, int STAGES, bool AK, bool AV, bool BKM, bool BV, bool MMA,
          bool WT = false, bool ROWS = false, int KG = 1>
struct LoomGemm {
  enum {
    V = 16 / (int)sizeof(T),
    THREADS = MMA ? 32 * P * Q : (BM / P) * (BN / Q),  // of one K group
    BLOCK_THREADS = KG * THREADS,
    // WT: an operand contiguous along k kept as swizzled rows [BM][BK].
    A_ROWS = WT && ROWS && !AK && AV,
    B_ROWS = WT && ROWS && !BKM && BV,
    // Shared-memory tiles k-major? (WT: unless kept as rows.)
    A_KM = AK || (WT && !A_ROWS),
    B_KM = BKM || (WT && !B_ROWS),
    // Padding keeps 16-byte alignment and spreads rows over the banks
    // (swizzled rows need none).
    A_LD = A_ROWS ? BK : WT ? BM + 4 : AK ? BM + 8 : BK + V,
    B_LD = B_ROWS ? BK : WT ? BN + 4 : BKM ? BN + 8 : BK + V,
    A_ELEMS = A_KM ? BK * A_LD : BM * A_LD,
    B_ELEMS = B_KM ? BK * B_LD : BN * B_LD,
    STAGE = A_ELEMS + B_ELEMS,
    // WT warp layout: 8 x 4 lanes, a warp tile of WTM x WTN.
    WTM = 8 * P,
    WTN = 4 * Q,
    WARPS_N = WT ? BN / WTN : 1,
    // The C tile staged for the epilogue: rows of BN + 4 (16-byte aligned;
    // 4-column groups of lanes 4 rows apart land in different banks).
    C_LD = BN + 4,
    // A thread's columns come in groups of 4 adjacent ones (see col()).
    COL_GROUPS = (WT || BKM) && Q % 4 == 0,
    // Epilogue elements a thread loads for before it stores any of them.
    EPI_BATCH = 4,
  };
  static_assert(!WT || (BM % WTM == 0 && BN % WTN == 0 && P % 4 == 0 && Q % 4 == 0 && BK % 8 == 0 &&
                        (BM / WTM) * (BN / WTN) * 32 == THREADS && BM % (THREADS / 8) == 0 &&
                        BN % (THREADS / 8) == 0),
                "LoomGemm: bad warp-tiled configuration");
  static_assert(!(A_ROWS || B_ROWS) || (V == 4 && BK % V == 0 && BK / V <= 8),
                "LoomGemm: swizzled rows need float32 and at most 8 chunks a row");
  static_assert(KG == 1 || (WT && BM * C_LD <= STAGES * STAGE), "LoomGemm: K groups need the warp-tiled loop and a staged C tile");
  // The thread's index within its K group.
  // Unsigned, as threadIdx.x: a division or remainder by a power of two is
  // then a shift or a mask, with no sign fix-up.
  static __device__ __forceinline__ unsigned tid() { return KG > 1 ? threadIdx.x % THREADS : threadIdx.x; }
  static __device__ __forceinline__ int a_at(int m, int k) {
    return A_ROWS ? loom_swizzled<BK, V>(m, k) : A_KM ? k * A_LD + m : m * A_LD + k;
  }
  static __device__ __forceinline__ int b_at(int k, int n) {
    return B_ROWS ? loom_swizzled<BK, V>(n, k) : B_KM ? k * B_LD + n : n * B_LD + k;
  }

  // Element copies of a k-contiguous operand into a k-major tile (WT only):
  // chunk c = 8 * (row pass) + k % 8; rows tid / 8 + r * THREADS / 8.
  template <int R>
  static __device__ __forceinline__ void load_transposed(T* dst, int ld, const T* src, loom_i64 rows, loom_i64 r0,
                                                         loom_i64 s_r, loom_i64 s_k, loom_i64 K, loom_i64 k0) {
    constexpr int TR = THREADS / 8;
    const int kl = tid() % 8, rl = tid() / 8;
#pragma unroll
    for (int r = 0; r < R / TR; ++r) {
      const int rr = rl + r * TR;
      const loom_i64 gr = r0 + rr;
      const bool rok = gr < rows;
      const T* row = src + (rok ? gr * s_r : 0);
#pragma unroll
      for (int k = kl; k < BK; k += 8) {
        const loom_i64 gk = k0 + k;
        const bool ok = rok && gk < K;
        loom_cp_elem<sizeof(T)>(dst + k * ld + rr, ok ? row + gk * s_k : src, ok ? (int)sizeof(T) : 0);
      }
    }
  }

  // Copies the slice [k0, k0 + BK) of both operands into stage `s`.
  static __device__ __forceinline__ void load(T* s, const T* A, const T* B, const LoomGemmArgs& g, loom_i64 m0,
                                              loom_i64 n0, loom_i64 k0) {
    T* as = s;
    T* bs = s + A_ELEMS;
    if (WT && !AK && !A_ROWS) {
      load_transposed<BM>(as, A_LD, A, g.M, m0, g.a_m, g.a_k, g.K, k0);
    } else if (AV) {
      constexpr int CM = AK ? BM / V : BM, CK = AK ? BK : BK / V;
#pragma unroll
      for (int c = tid(); c < CM * CK; c += THREADS) {
        const int m = AK ? (c % CM) * V : c / CK, k = AK ? c / CM : (c % CK) * V;
        const loom_i64 gm = m0 + m, gk = k0 + k;
        const loom_i64 room = AK ? (gk < g.K ? g.M - gm : 0) : (gm < g.M ? g.K - gk : 0);
        const int valid = room <= 0 ? 0 : room >= V ? V : (int)room;
        loom_cp16(as + a_at(m, k), valid ? A + gm * g.a_m + gk * g.a_k : A, valid * (int)sizeof(T));
      }
    } else {
#pragma unroll 4
      for (int c = tid(); c < BM * BK; c += THREADS) {
        const int m = AK ? c % BM : c / BK, k = AK ? c / BM : c % BK;
        const loom_i64 gm = m0 + m, gk = k0 + k;
        const bool ok = gm < g.M && gk < g.K;
        loom_cp_elem<sizeof(T)>(as + a_at(m, k), ok ? A + gm * g.a_m + gk * g.a_k : A, ok ? (int)sizeof(T) : 0);
      }
    }
    if (WT && !BKM && !B_ROWS) {
      load_transposed<BN>(bs, B_LD, B, g.N, n0, g.b_n, g.b_k, g.K, k0);
    } else if (BV) {
      constexpr int CN = BKM ? BN / V : BN, CK = BKM ? BK : BK / V;
#pragma unroll
      for (int c = tid(); c < CN * CK; c += THREADS) {
        const int n = BKM ? (c % CN) * V : c / CK, k = BKM ? c / CN : (c % CK) * V;
        const loom_i64 gn = n0 + n, gk = k0 + k;
        const loom_i64 room = BKM ? (gk < g.K ? g.N - gn : 0) : (gn < g.N ? g.K - gk : 0);
        const int valid = room <= 0 ? 0 : room >= V ? V : (int)room;
        loom_cp16(bs + b_at(k, n), valid ? B + gk * g.b_k + gn * g.b_n : B, valid * (int)sizeof(T));
      }
    } else {
#pragma unroll 4
      for (int c = tid(); c < BN * BK; c += THREADS) {
        const int n = BKM ? c % BN : c / BK, k = BKM ? c / BN : c % BK;
        const loom_i64 gn = n0 + n, gk = k0 + k;
        const bool ok = gn < g.N && gk < g.K;
        loom_cp_elem<sizeof(T)>(bs + b_at(k, n), ok ? B + gk * g.b_k + gn * g.b_n : B, ok ? (int)sizeof(T) : 0);
      }
    }
  }

  // FFMA thread tile: row i / column j of this thread within the block tile.
  static __device__ __forceinline__ int row(int i) {
    if (WT) {
      const int warp = tid() / 32, lm = (tid() % 32) / 4;
      return (warp / WARPS_N) * WTM + (i / 4) * 32 + lm * 4 + i % 4;
    }
    const int ty = tid() / (BN / Q);
    return AK ? ty * 4 + (i % 4) + (i / 4) * (BM / (P / 4)) : ty + i * (BM / P);
  }
  static __device__ __forceinline__ int col(int j) {
    if (WT) {
      const int warp = tid() / 32, ln = tid() % 4;
      return (warp % WARPS_N) * WTN + (j / 4) * 16 + ln * 4 + j % 4;
    }
    const int tx = tid() % (BN / Q);
    return BKM ? tx * 4 + (j % 4) + (j / 4) * (BN / (Q / 4)) : tx + j * (BN / Q);
  }

  // acc += the products of a group of V k-steps' fragments.
  static __device__ __forceinline__ void fma_group(const T (&a)[V][P], const T (&b)[V][Q], T (&acc)[P][Q]) {
#pragma unroll
    for (int kk = 0; kk < V; ++kk)
#pragma unroll
      for (int i = 0; i < P; ++i)
#pragma unroll
        for (int j = 0; j < Q; ++j) acc[i][j] = loom_fma(a[kk][i], b[kk][j], acc[i][j]);
  }

  static __device__ __forceinline__ void ffma_slice(const T* s, T (&acc)[P][Q]) {
    const T* as = s;
    const T* bs = s + A_ELEMS;
#pragma unroll
    for (int kc = 0; kc < BK; kc += V) {
      T a[V][P], b[V][Q];
      if (AK) {
#pragma unroll
        for (int kk = 0; kk < V; ++kk)
#pragma unroll
          for (int i = 0; i < P; i += 4) loom_lds<4>(&a[kk][i], as + a_at(row(i), kc + kk));
      } else {
#pragma unroll
        for (int i = 0; i < P; ++i) {
          T v[V];
          loom_lds<V>(v, as + a_at(row(i), kc));
#pragma unroll
          for (int kk = 0; kk < V; ++kk) a[kk][i] = v[kk];
        }
      }
      if (BKM) {
#pragma unroll
        for (int kk = 0; kk < V; ++kk)
#pragma unroll
          for (int j = 0; j < Q; j += 4) loom_lds<4>(&b[kk][j], bs + b_at(kc + kk, col(j)));
      } else {
#pragma unroll
        for (int j = 0; j < Q; ++j) {
          T v[V];
          loom_lds<V>(v, bs + b_at(kc, col(j)));
#pragma unroll
          for (int kk = 0; kk < V; ++kk) b[kk][j] = v[kk];
        }
      }
      fma_group(a, b, acc);
    }
  }

  // Warp-tiled FFMA over one slice, fragments double-buffered in registers.
  static __device__ __forceinline__ void wt_frag(const T* as, const T* bs, int k, int r0, int c0, T (&a)[P], T (&b)[Q]) {
#pragma unroll
    for (int i = 0; i < P; i += 4) loom_lds<4>(&a[i], as + k * A_LD + r0 + (i / 4) * 32);
#pragma unroll
    for (int j = 0; j < Q; j += 4) loom_lds<4>(&b[j], bs + k * B_LD + c0 + (j / 4) * 16);
  }
  static __device__ __forceinline__ void wt_slice(const T* s, T (&acc)[P][Q]) {
    if constexpr (A_ROWS || B_ROWS) {
      wt_slice_rows(s, acc);
      return;
    }
    const T* as = s;
    const T* bs = s + A_ELEMS;
    const int r0 = row(0), c0 = col(0);
    T a[2][P], b[2][Q];
    wt_frag(as, bs, 0, r0, c0, a[0], b[0]);
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      if (k + 1 < BK) wt_frag(as, bs, k + 1, r0, c0, a[(k + 1) & 1], b[(k + 1) & 1]);
#pragma unroll
      for (int i = 0; i < P; ++i)
#pragma unroll
        for (int j = 0; j < Q; ++j) acc[i][j] = loom_fma(a[k & 1][i], b[k & 1][j], acc[i][j]);
    }
  }
  // The same with a swizzled rows tile: V k-steps per group, the same
  // loads per k. f[kk][i] = k-step kc + kk of the thread's row (column) i,
  // r0 + (i / 4) * STEP + i % 4: from a swizzled rows tile one 16-byte load
  // per row (its chunk moved by the row's group of 4: r0's, changed by
  // (i / 4) * STEP / 4 groups), from a k-major tile one per 4 rows and k.
  template <bool SWZ, int N, int STEP, int LD>
  static __device__ __forceinline__ void wt_group(const T* tile, int r0, int kc, T (&f)[V][N]) {
    if constexpr (SWZ) {
      enum { CH = BK / V };
      const int sw = (r0 >> 2) & (CH - 1);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        T v[V];
        const int chunk = (kc / V) ^ sw ^ (((i / 4) * (STEP / 4)) & (CH - 1));
        loom_lds<V>(v, tile + (r0 + (i / 4) * STEP + i % 4) * BK + chunk * V);
#pragma unroll
        for (int kk = 0; kk < V; ++kk) f[kk][i] = v[kk];
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < V; ++kk)
#pragma unroll
        for (int i = 0; i < N; i += 4) loom_lds<4>(&f[kk][i], tile + (kc + kk) * LD + r0 + (i / 4) * STEP);
    }
  }
  static __device__ __forceinline__ void wt_slice_rows(const T* s, T (&acc)[P][Q]) {
    const int r0 = row(0), c0 = col(0);
#pragma unroll
    for (int kc = 0; kc < BK; kc += V) {
      T a[V][P], b[V][Q];
      wt_group<A_ROWS, P, 32, A_LD>(s, r0, kc, a);
      wt_group<B_ROWS, Q, 16, B_LD>(s + A_ELEMS, c0, kc, b);
      fma_group(a, b, acc);
    }
  }

  // TF32 warp tile: MI x NI m16n8k8 products; fragment layout as in the PTX
  // ISA (g = lane / 4, t = lane % 4).
  enum { WM = BM / P, WN = BN / Q, MI = WM / 16 > 0 ? WM / 16 : 1, NI = WN / 8 > 0 ? WN / 8 : 1 };
  static __device__ __forceinline__ void mma_slice(const T* s, float (&acc)[MI][NI][4]) {
    const float* as = (const float*)s;
    const float* bs = (const float*)(s + A_ELEMS);
    const int warp = tid() / 32, lane = tid() % 32, g = lane / 4, t = lane % 4;
    const int wm = (warp / Q) * WM, wn = (warp % Q) * WN;
#pragma unroll
    for (int kc = 0; kc < BK; kc += 8) {
      unsigned a[MI][4], b[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int r = wm + mi * 16 + g;
        a[mi][0] = loom_tf32(as[a_at(r, kc + t)]);
        a[mi][1] = loom_tf32(as[a_at(r + 8, kc + t)]);
        a[mi][2] = loom_tf32(as[a_at(r, kc + t + 4)]);
        a[mi][3] = loom_tf32(as[a_at(r + 8, kc + t + 4)]);
      }
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int c = wn + ni * 8 + g;
        b[ni][0] = loom_tf32(bs[b_at(kc + t, c)]);
        b[ni][1] = loom_tf32(bs[b_at(kc + t + 4, c)]);
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
          asm volatile(
              "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
              "{%0,%1,%2,%3};\n"
              : "+f"(acc[mi][ni][0]), "+f"(acc[mi][ni][1]), "+f"(acc[mi][ni][2]), "+f"(acc[mi][ni][3])
              : "r"(a[mi][0]), "r"(a[mi][1]), "r"(a[mi][2]), "r"(a[mi][3]), "r"(b[ni][0]), "r"(b[ni][1]));
    }
  }

  // The whole block: tile (grouped so that neighbouring blocks share
  // operand panels in L2), pipelined main loop, epilogue.
  // op_a / op_b: the operands' fused producers, or LoomRawOperand.
  template <class Epi, class OpA = LoomRawOperand, class OpB = LoomRawOperand>
  static __device__ __forceinline__ void run(const T* A, const T* B, const LoomGemmArgs& ga, Epi epi,
                                             loom_i64 kchunk = 0, OpA op_a = {}, OpB op_b = {}) {
    run_with(A, B, ga, [&](loom_i64 b, loom_i64 m, loom_i64 n, T v, const LoomNoLoads&) { epi(b, m, n, v); },
             [](loom_i64, loom_i64, loom_i64) { return LoomNoLoads{}; }, kchunk, op_a, op_b);
  }

  // The operands' fused producers applied in place to the slice at k0 of
  // a stage, each element once, the padding (past M, N or K) left zero.
  // A thread walks the tile's contiguous dim, so a warp's accesses are to
  // neighbouring words.
  template <class OpA, class OpB>
  static __device__ __forceinline__ void prepare(T* s, const LoomGemmArgs& g, loom_i64 m0, loom_i64 n0, loom_i64 k0,
                                                 OpA op_a, OpB op_b) {
    if constexpr (!loom_is_raw<OpA>::value) {
      T* as = s;
      for (int c = tid(); c < BM * BK; c += THREADS) {
        const int m = A_KM ? c % BM : c / BK, k = A_KM ? c / BM : c % BK;
        if (m0 + m < g.M && k0 + k < g.K) as[a_at(m, k)] = op_a(as[a_at(m, k)]);
      }
    }
    if constexpr (!loom_is_raw<OpB>::value) {
      T* bs = s + A_ELEMS;
      for (int c = tid(); c < BN * BK; c += THREADS) {
        const int n = B_KM ? c % BN : c / BK, k = B_KM ? c / BN : c % BK;
        if (n0 + n < g.N && k0 + k < g.K) bs[b_at(k, n)] = op_b(bs[b_at(k, n)]);
      }
    }
  }

  // epi_loads(b, m, n) returns what the epilogue of element (m, n) reads
  // from memory; epi(b, m, n, sum, loaded) computes and stores it (below).
  template <class Epi, class Load, class OpA = LoomRawOperand, class OpB = LoomRawOperand>
  static __device__ __forceinline__ void run_with(const T* A, const T* B, const LoomGemmArgs& ga, Epi epi,
                                                  Load epi_loads, loom_i64 kchunk = 0, OpA op_a = {}, OpB op_b = {}) {
    LoomGemmArgs g = ga;
    loom_i64 m0, n0;
    const loom_i64 batch = loom_gemm_block(A, B, g, kchunk, BM, BN, m0, n0);
    extern __shared__ __align__(16) unsigned char loom_gemm_smem[];
    T* smem = reinterpret_cast<T*>(loom_gemm_smem);
    // K groups: group `grp` takes K range [grp * kg, (grp + 1) * kg), kg
    // whole slices; every group runs the same number of slices (the
    // pipeline's barriers are the block's), a short or empty range is
    // zero-filled by the copies.
    const int grp = KG > 1 ? (int)threadIdx.x / THREADS : 0;
    loom_i64 KT = (g.K + BK - 1) / BK;
    if constexpr (KG > 1) {
      KT = (KT + KG - 1) / KG;
      loom_gemm_k_range(A, B, g, grp * KT * BK, KT * BK);
      smem += grp * STAGES * STAGE;
    }
    // Planned copies (LoomTileCopies, LoomTransposedCopies) where both
    // operands allow them; load() otherwise.
    typedef LoomTransposedCopies<T, THREADS, BK, BM, A_LD> TransposedA;
    typedef LoomTileCopies<T, THREADS, BK, BM, AK, A_LD, A_ROWS> VectorA;
    typedef LoomTransposedCopies<T, THREADS, BK, BN, B_LD> TransposedB;
    typedef LoomTileCopies<T, THREADS, BK, BN, BKM, B_LD, B_ROWS> VectorB;
    constexpr bool A_T = WT && !AK && !A_ROWS, B_T = WT && !BKM && !B_ROWS;
    constexpr bool PLANNED = (A_T ? TransposedA::usable : AV && VectorA::usable) &&
                             (B_T ? TransposedB::usable : BV && VectorB::usable);
    const TransposedA ta(A, g.M, m0, g.a_m, g.a_k, tid());
    const VectorA va(A, g.M, m0, g.a_m, g.a_k, tid());
    const TransposedB tb(B, g.N, n0, g.b_n, g.b_k, tid());
    const VectorB vb(B, g.N, n0, g.b_n, g.b_k, tid());
    auto fill = [&](T* stage, loom_i64 k0) {
      if constexpr (PLANNED) {
        if constexpr (A_T) ta.copy(stage, k0, g.K);
        else va.copy(stage, k0, g.K);
        if constexpr (B_T) tb.copy(stage + A_ELEMS, k0, g.K);
        else vb.copy(stage + A_ELEMS, k0, g.K);
      } else {
        load(stage, A, B, g, m0, n0, k0);
      }
    };
    typedef typename LoomGemmAcc<T, MMA, P, Q, MI, NI>::type Acc;
    Acc acc;
    LoomGemmAcc<T, MMA, P, Q, MI, NI>::zero(acc);
    // Fused operand producers: on planned copies each thread applies them
    // to its own chunks as they land; otherwise the block applies them to
    // the whole slice, behind a barrier of their own (prepare).
    constexpr bool OPS = !loom_is_raw<OpA>::value || !loom_is_raw<OpB>::value;
    auto land = [&](T* stage, loom_i64 k0) {
      if constexpr (OPS && PLANNED) {
        if constexpr (!loom_is_raw<OpA>::value) {
          if constexpr (A_T) ta.apply(stage, k0, g.K, op_a);
          else va.apply(stage, k0, g.K, op_a);
        }
        if constexpr (!loom_is_raw<OpB>::value) {
          if constexpr (B_T) tb.apply(stage + A_ELEMS, k0, g.K, op_b);
          else vb.apply(stage + A_ELEMS, k0, g.K, op_b);
        }
      }
    };
    loom_gemm_pipeline<STAGES>(smem, STAGE, KT, BK, fill, land, [&](T* stage, loom_i64 k0) {
      if constexpr (OPS && !PLANNED) {
        prepare(stage, g, m0, n0, k0, op_a, op_b);
        __syncthreads();
      }
      if constexpr (MMA) mma_slice(stage, acc);
      else if constexpr (WT) wt_slice(stage, acc);
      else ffma_slice(stage, acc);
    });
    if constexpr (MMA) {
      const int warp = tid() / 32, lane = tid() % 32, gq = lane / 4, t = lane % 4;
      const int wm = (warp / Q) * WM, wn = (warp % Q) * WN;
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const loom_i64 gm = m0 + wm + mi * 16 + gq + (q >= 2 ? 8 : 0), gn = n0 + wn + ni * 8 + 2 * t + (q & 1);
            if (gm < g.M && gn < g.N) epi(batch, gm, gn, (T)acc[mi][ni][q], epi_loads(batch, gm, gn));
          }
    } else if constexpr (BM * C_LD <= STAGES * STAGE) {
      // The tile leaves through shared memory (the pipeline's, free now):
      // a thread's P x Q elements are 4-column groups spread over 8 or
      // more rows, so reading the epilogue's operands and writing C from
      // registers touched four 32-byte sectors per 128 useful bytes (ncu on
      // W4's weight gradient with its SGD update: 57% excess sectors, half
      // the stalls on those loads). Read back row by row, a warp's elements
      // are 32 adjacent columns.
      __syncthreads();  // every warp is done with the last stage
      // (K groups: group grp's tile at its own stages, which hold it.)
#pragma unroll
      for (int i = 0; i < P; ++i) {
        T* crow = smem + row(i) * C_LD;
        if constexpr (COL_GROUPS) {
#pragma unroll
          for (int j = 0; j < Q; j += 4) loom_sts4(crow + col(j), acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
        } else {
#pragma unroll
          for (int j = 0; j < Q; ++j) crow[col(j)] = acc[i][j];
        }
      }
      __syncthreads();
      // Read back, every thread of the block: the sum over the K groups in
      // group order (one group: the element itself).
      smem -= grp * STAGES * STAGE;
      auto at = [&](int r, int c) {
        T v = smem[r * C_LD + c];
#pragma unroll
        for (int q = 1; q < KG; ++q) v += smem[q * STAGES * STAGE + r * C_LD + c];
        return v;
      };
      // A thread's elements EPI_BATCH at a time: every load of the batch,
      // then every element's arithmetic and stores. The compiler may not
      // move a load above an earlier store (a donated output may alias an
      // input), so one element at a time each waited out its own loads
      // (ncu on W4's weight gradient with its SGD update: 31% of the stall
      // samples, on the momentum and weight loads). The order is safe: a
      // kernel reads a donated input only at the element it writes
      // (runtime/output_plan.cpp, can_write_in_place), so no load of one
      // element reads what another element's store writes.
      typedef decltype(epi_loads(0, 0, 0)) Loaded;
      if constexpr (__is_empty(Loaded)) {  // a plain store (W6 ran 4% slower through the batches)
#pragma unroll 4
        for (int e = threadIdx.x; e < BM * BN; e += BLOCK_THREADS) {
          const int r = e / BN, c = e % BN;
          const loom_i64 gm = m0 + r, gn = n0 + c;
          if (gm < g.M && gn < g.N) epi(batch, gm, gn, at(r, c), Loaded{});
        }
      } else {
        for (int e0 = threadIdx.x; e0 < BM * BN; e0 += EPI_BATCH * BLOCK_THREADS) {
          Loaded in[EPI_BATCH];
#pragma unroll
          for (int u = 0; u < EPI_BATCH; ++u) {
            const int e = e0 + u * BLOCK_THREADS;
            const loom_i64 gm = m0 + e / BN, gn = n0 + e % BN;
            if (e < BM * BN && gm < g.M && gn < g.N) in[u] = epi_loads(batch, gm, gn);
          }
#pragma unroll
          for (int u = 0; u < EPI_BATCH; ++u) {
            const int e = e0 + u * BLOCK_THREADS, r = e / BN, c = e % BN;
            const loom_i64 gm = m0 + r, gn = n0 + c;
            if (e < BM * BN && gm < g.M && gn < g.N) epi(batch, gm, gn, at(r, c), in[u]);
          }
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const loom_i64 gm = m0 + row(i);
        if (gm >= g.M) continue;
#pragma unroll
        for (int j = 0; j < Q; ++j) {
          const loom_i64 gn = n0 + col(j);
          if (gn < g.N) epi(batch, gm, gn, acc[i][j], epi_loads(batch, gm, gn));
        }
      }
    }
  }
};

// Split-K's second kernel: C = sum over the splits of the partial products
// (in split order, so the result does not depend on scheduling), then the
// epilogue, one element per thread of a grid-stride loop.
template <class T>
struct LoomGemmReduce {
  template <class Epi>
  static __device__ __forceinline__ void run(const T* ws, int split, loom_i64 batch, loom_i64 M, loom_i64 N, Epi epi) {
    const loom_i64 mn = M * N, total = batch * mn;
    for (loom_i64 i = (loom_i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (loom_i64)gridDim.x * blockDim.x) {
      T v = ws[i];
      for (int s = 1; s < split; ++s) v += ws[s * total + i];
      const loom_i64 b = i / mn, r = i - b * mn, m = r / N;
      epi(b, m, r - m * N, v);
    }
  }
};

// ---------------------------------------------------------------------------
// BF16 tensor cores.
//
// bfloat16 is the upper half of a float32, so operands travel as their bits
// (unsigned short), converted by kernels/cuda/bfloat16.cuh, which every
// source that includes this file puts before it.

// ldmatrix.x4: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes
// each) of 8x8 matrix i, and register i of lane l receives from matrix i
// the pair (row l/4, columns 2(l%4), 2(l%4)+1); with .trans, the pair
// (rows 2(l%4), 2(l%4)+1, column l/4), i.e. the same pair of the transposed
// matrix. The lower-numbered element is in the low 16 bits, as mma wants.
// volatile: it reads shared memory that __syncthreads orders, and the
// compiler sees no memory operand it could order by.
template <bool TRANS>
__device__ __forceinline__ void loom_ldsm_x4(unsigned (&r)[4], const void* p) {
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(loom_smem_addr(p)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(loom_smem_addr(p)));
}

// d = a * b + d, one m16n8k16 tile with float accumulators. A pure register
// operation, so not volatile: ptxas may interleave it with the next loads.
__device__ __forceinline__ void loom_mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same tile with float16 operands: mma's .f16 form has .bf16's
// fragments, so LoomGemmBf16<..., F16 = true> differs only in this call.
__device__ __forceinline__ void loom_mma_f16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// C[b, m, n] = sum over k of A[b, m, k] * B[b, k, n] with bfloat16 operands
// (float16 ones when F16) and float32 accumulation, then epi(b, m, n, float C). Same pipeline,
// flags, tile order and split-K as LoomGemm; WARPS_M x WARPS_N warps, each a
// (BM / WARPS_M) x (BN / WARPS_N) tile of m16n8k16 mma.sync.
//
// Shared tiles keep the operand's contiguous global dim contiguous: A is
// [BK][BM + 8] when AK, else [BM][BK + 8]; B is [BK][BN + 8] when BKM, else
// [BN][BK + 8]. The 8 padding elements make a row 16 * odd bytes long, so
// the 8 rows one ldmatrix phase reads (16 bytes each) start in 8 different
// 4-bank groups: no bank conflicts. They also keep every 16-byte chunk of a
// row 16-byte aligned, for cp.async and ldmatrix.
//
// Fragments (PTX ISA, mma.m16n8k16 .bf16; g = lane / 4, t = lane % 4):
//   A (row): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..),
//            a[3] = (g+8, 2t+8..)  as (m, k) of the 16 x 16 tile;
//   B (col): b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8..2t+9, n g);
//   C:       c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1).
// So A's register i is the 8x8 block (m half i % 2, k half i / 2), and one
// ldmatrix.x4 with matrix i at that block loads all four. For B, two n8
// tiles share one x4: matrix i is (k half i % 2, n half i / 2), and its
// registers are b[0], b[1] of the first tile, then of the second. Which
// ldmatrix: a tile whose rows run along the fragment's pair dimension (A
// [BM][BK]: rows m, pairs along k; B [BN][BK]: rows n, pairs along k) is
// read plain; a tile stored the other way (A [BK][BM], B [BK][BN]: rows k)
// is read with .trans, which hands each lane the pair down a column.
template <int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES, bool AK, bool AV, bool BKM, bool BV,
          bool F16 = false>
struct LoomGemmBf16 {
  typedef unsigned short bf16;
  enum {
    V = 8,  // bf16 per 16-byte copy
    THREADS = 32 * WARPS_M * WARPS_N,
    WM = BM / WARPS_M,
    WN = BN / WARPS_N,
    MI = WM / 16,  // m16 tiles per warp
    NI = WN / 8,   // n8 tiles per warp (even: loaded in pairs)
    A_LD = AK ? BM + 8 : BK + 8,
    B_LD = BKM ? BN + 8 : BK + 8,
    A_ELEMS = AK ? BK * A_LD : BM * A_LD,
    B_ELEMS = BKM ? BK * B_LD : BN * B_LD,
    STAGE = A_ELEMS + B_ELEMS,  // elements
    SMEM_BYTES = 2 * STAGES * STAGE,  // dynamic shared memory the launch must give
  };
  static_assert(WM % 16 == 0 && WN % 16 == 0 && WM > 0 && WN > 0, "LoomGemmBf16: a warp tile is whole 16 x 16 blocks");
  static_assert(BK % 16 == 0, "LoomGemmBf16: BK is whole k16 steps");
  static_assert(STAGES >= 2, "LoomGemmBf16: the pipeline needs two stages");

  static __device__ __forceinline__ int a_at(int m, int k) { return AK ? k * A_LD + m : m * A_LD + k; }
  static __device__ __forceinline__ int b_at(int k, int n) { return BKM ? k * B_LD + n : n * B_LD + k; }

  // Rows [r0, r0 + R) by k [k0, k0 + BK) of an operand (A: rows are m; B:
  // rows are n) into its tile: [BK][R + 8] when KM (contiguous along rows),
  // else [R][BK + 8]. Consecutive threads take consecutive chunks of the
  // contiguous dim, so a warp's reads coalesce. Out of range: zeros.
  template <int R, bool KM, bool VEC>
  static __device__ __forceinline__ void load_tile(bf16* dst, const bf16* src, loom_i64 rows, loom_i64 r0, loom_i64 s_r,
                                                   loom_i64 s_k, loom_i64 K, loom_i64 k0) {
    constexpr int LD = KM ? R + 8 : BK + 8;
    if (VEC) {  // 8-element chunks; a chunk cut by the edge reads only its valid part (src-size)
      constexpr int CR = KM ? R / V : R, CK = KM ? BK : BK / V;
#pragma unroll
      for (int c = threadIdx.x; c < CR * CK; c += THREADS) {
        const int r = KM ? (c % CR) * V : c / CK, k = KM ? c / CR : (c % CK) * V;
        const loom_i64 gr = r0 + r, gk = k0 + k;
        const loom_i64 room = KM ? (gk < K ? rows - gr : 0) : (gr < rows ? K - gk : 0);
        const int valid = room <= 0 ? 0 : room >= V ? V : (int)room;
        loom_cp16(dst + (KM ? k * LD + r : r * LD + k), valid ? src + gr * s_r + gk * s_k : src, valid * 2);
      }
    } else {  // cp.async has no 2-byte form: plain loads and stores, ordered by the same __syncthreads
#pragma unroll 4
      for (int c = threadIdx.x; c < R * BK; c += THREADS) {
        const int r = KM ? c % R : c / BK, k = KM ? c / R : c % BK;
        const loom_i64 gr = r0 + r, gk = k0 + k;
        dst[KM ? k * LD + r : r * LD + k] = gr < rows && gk < K ? src[gr * s_r + gk * s_k] : (bf16)0;
      }
    }
  }

  static __device__ __forceinline__ void load(bf16* s, const bf16* A, const bf16* B, const LoomGemmArgs& g, loom_i64 m0,
                                              loom_i64 n0, loom_i64 k0) {
    load_tile<BM, AK, AV>(s, A, g.M, m0, g.a_m, g.a_k, g.K, k0);
    load_tile<BN, BKM, BV>(s + A_ELEMS, B, g.N, n0, g.b_n, g.b_k, g.K, k0);
  }

  // One slice: per k16 step, MI A fragments and NI / 2 B fragment pairs by
  // ldmatrix, then MI x NI mma. Lane l addresses row l % 8 of matrix l / 8
  // (see above); the row runs along the tile's stored row dimension.
  static __device__ __forceinline__ void mma_slice(const bf16* s, float (&acc)[MI][NI][4]) {
    const bf16* as = s;
    const bf16* bs = s + A_ELEMS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, mat = lane / 8, r = lane % 8;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
    // Matrix mat of A: m half mat % 2, k half mat / 2; of a B pair: k half
    // mat % 2, n half mat / 2. The lane's row offset goes to the stored row dim.
    const int am = wm + (mat % 2) * 8 + (AK ? 0 : r), ak = (mat / 2) * 8 + (AK ? r : 0);
    const int bn = wn + (mat / 2) * 8 + (BKM ? 0 : r), bk = (mat % 2) * 8 + (BKM ? r : 0);
#pragma unroll
    for (int kc = 0; kc < BK; kc += 16) {
      unsigned a[MI][4], b[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) loom_ldsm_x4<AK>(a[mi], as + a_at(am + mi * 16, ak + kc));
#pragma unroll
      for (int nj = 0; nj < NI / 2; ++nj) {
        unsigned q[4];
        loom_ldsm_x4<BKM>(q, bs + b_at(bk + kc, bn + nj * 16));
        b[2 * nj][0] = q[0], b[2 * nj][1] = q[1], b[2 * nj + 1][0] = q[2], b[2 * nj + 1][1] = q[3];
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          if (F16) loom_mma_f16(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
          else loom_mma_bf16(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
        }
    }
  }

  // The epilogue runs from the accumulators here, an element at a time.
  template <class Epi, class Load>
  static __device__ __forceinline__ void run_with(const unsigned short* A, const unsigned short* B,
                                                  const LoomGemmArgs& ga, Epi epi, Load epi_loads) {
    run(A, B, ga, [&](loom_i64 b, loom_i64 m, loom_i64 n, float v) { epi(b, m, n, v, epi_loads(b, m, n)); });
  }
  // The whole block, as LoomGemm::run: split-K range, grouped tile, STAGES
  // slices in flight, then the epilogue from the accumulators.
  template <class Epi>
  static __device__ __forceinline__ void run(const unsigned short* A, const unsigned short* B, const LoomGemmArgs& ga,
                                             Epi epi, loom_i64 kchunk = 0) {
    LoomGemmArgs g = ga;
    loom_i64 m0, n0;
    const loom_i64 batch = loom_gemm_block(A, B, g, kchunk, BM, BN, m0, n0);
    extern __shared__ __align__(16) unsigned char loom_gemm_smem[];
    bf16* smem = reinterpret_cast<bf16*>(loom_gemm_smem);
    const loom_i64 KT = (g.K + BK - 1) / BK;
    typedef LoomTileCopies<bf16, THREADS, BK, BM, AK, A_LD> CopiesA;
    typedef LoomTileCopies<bf16, THREADS, BK, BN, BKM, B_LD> CopiesB;
    constexpr bool PLANNED = AV && BV && CopiesA::usable && CopiesB::usable;
    const CopiesA ca(A, g.M, m0, g.a_m, g.a_k);
    const CopiesB cb(B, g.N, n0, g.b_n, g.b_k);
    auto fill = [&](bf16* stage, loom_i64 k0) {
      if constexpr (PLANNED) {
        ca.copy(stage, k0, g.K);
        cb.copy(stage + A_ELEMS, k0, g.K);
      } else {
        load(stage, A, B, g, m0, n0, k0);
      }
    };
    float acc[MI][NI][4];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.f;
    loom_gemm_pipeline<STAGES>(smem, STAGE, KT, BK, fill, [](bf16*, loom_i64) {},
                               [&](const bf16* stage, loom_i64) { mma_slice(stage, acc); });
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, t = lane % 4;
    const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const loom_i64 gm = m0 + wm + mi * 16 + gq + (q >= 2 ? 8 : 0), gn = n0 + wn + ni * 8 + 2 * t + (q & 1);
          if (gm < g.M && gn < g.N) epi(batch, gm, gn, acc[mi][ni][q]);
        }
  }
};
