// LoomGemmWg: the GEMM block on Hopper's warpgroup tensor cores
// (wgmma.mma_async): bfloat16 operands, or float32 ones as TF32 when the
// user allows it. Embedded after gemm_template.cu, whose helpers it uses
// (loom_gemm_block, cp.async), into the one source NVRTC
// compiles for GEMM kernels (CMakeLists.txt: kGemmSource).
//
// The instructions exist only in code compiled for sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL); jit/cuda/gemm.cpp offers these
// configurations only on such a device, where the runtime compiles for it
// (DeviceContext::arch), and only when both operands allow 16-byte copies
// (TF32: and both are contiguous along K).
//
// A block of BM / 64 warpgroups (128 threads each) computes a BM x BN tile
// of C: warpgroup w its rows [64 w, 64 w + 64) and all BN columns, one
// m64nBNk16 (bfloat16) or m64nBNk8 (TF32) product per 32 bytes of k,
// accumulated in registers (BN / 2 floats a thread). K is walked in slices
// of 128 bytes (64 bfloat16, 32 floats), each copied by cp.async into one
// of STAGES shared buffers, laid out as wgmma reads them ("128-byte
// swizzle", PTX ISA: Shared Memory Matrix Layout):
// - an operand contiguous along K (A [m][k], B as [n][k]; "K-major"): row
//   r of the tile (an m or an n) is 128 bytes at r * 128, and its 16-byte
//   chunk c sits at chunk position c ^ (r % 8);
// - an operand contiguous along m or n (A [k][m], B [k][n]; "MN-major",
//   bfloat16 only): blocks of 64 m (or n), each 64 rows of k of 128 bytes
//   (8 KB); chunk c of row k (m 8c..8c+7 of the block) sits at position
//   c ^ (k % 8).
// The XOR puts the 8 rows that one 16-byte column of reads touches in 8
// different bank groups; the hardware applies it to the address bits, so
// every 1024-byte group of 8 rows starts 1024-aligned (the dynamic shared
// memory's base is rounded up: SMEM_BYTES has 1 KB to spare).
//
// Descriptors (PTX ISA: Matrix Descriptor Format): start address, leading
// byte offset (MN-major: from one 64-element block of m / n to the next;
// unused for K-major), stride byte offset (from one group of 8 rows to the
// next: 1024 in both layouts), 128-byte swizzle. Instruction j of a slice
// starts 32 j bytes into a K-major row, or 16 k rows (2048 bytes) further
// down an MN-major block.
//
// Pipeline: STAGES - 2 slices copied ahead and one group of products in
// flight. For slice kt: wait for its copy, make it visible to the tensor
// cores' async proxy (fence.proxy.async), barrier; then copy slice
// kt + STAGES - 2 into the stage slice kt - 2 used (every warpgroup has
// waited for its products on it before the barrier), issue slice kt's
// products and commit them, and wait until only they are in flight.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LOOM_WGMMA 1
#endif

__device__ __forceinline__ unsigned long long loom_wg_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16 |
         (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32 | 1ull << 62;
}
__device__ __forceinline__ void loom_wg_fence() {
#ifdef LOOM_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void loom_wg_commit() {
#ifdef LOOM_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void loom_wg_wait() {
#ifdef LOOM_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Shared memory written through the generic proxy (cp.async included)
// becomes visible to wgmma's reads.
__device__ __forceinline__ void loom_fence_async_shared() {
#ifdef LOOM_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// The accumulators are written by the tensor cores behind the compiler's
// back: an empty volatile asm per register keeps every read after the wait.
template <int R>
__device__ __forceinline__ void loom_wg_hold(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// A 16-byte cp.async to a shared address, `bytes` of them read.
__device__ __forceinline__ void loom_cp16_at(unsigned dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

// The accumulator operands of an m64nN product (N / 2 floats a thread):
// their places in the instruction and their register constraints.
#define LOOM_WG_D128 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define LOOM_WG_D256 \
  LOOM_WG_D128 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define LOOM_WG_OUT128 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define LOOM_WG_OUT256 \
  LOOM_WG_OUT128, \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// d += a * b, one m64nNk16 (bfloat16) or m64nNk8 (TF32) product of the
// warpgroup: operands in shared memory described by da / db (bfloat16 only:
// TA / TB, stored M- / N-major), float sums. volatile: it reads shared
// memory the barrier orders. TF32 reads the float32 bits as they are (the
// tensor cores drop the 13 low mantissa bits), where the mma.sync path
// rounds them first (cvt.rna): both are within TF32's 2^-10.
template <int TA, int TB>
__device__ __forceinline__ void loom_wg_bf16_128(float (&d)[64], unsigned long long da, unsigned long long db) {
#ifdef LOOM_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" LOOM_WG_D128 "}, %64, %65, p, 1, 1, "
               "%67, %68;\n}\n"
               : LOOM_WG_OUT128
               : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
#endif
}

template <int TA, int TB>
__device__ __forceinline__ void loom_wg_bf16_256(float (&d)[128], unsigned long long da, unsigned long long db) {
#ifdef LOOM_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" LOOM_WG_D256 "}, %128, %129, p, 1, 1, "
               "%131, %132;\n}\n"
               : LOOM_WG_OUT256
               : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
#endif
}

__device__ __forceinline__ void loom_wg_tf32_128(float (&d)[64], unsigned long long da, unsigned long long db) {
#ifdef LOOM_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {" LOOM_WG_D128 "}, %64, %65, p, 1, 1;\n}\n"
               : LOOM_WG_OUT128
               : "l"(da), "l"(db), "r"(1));
#endif
}

__device__ __forceinline__ void loom_wg_tf32_256(float (&d)[128], unsigned long long da, unsigned long long db) {
#ifdef LOOM_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {" LOOM_WG_D256 "}, %128, %129, p, 1, 1;\n}\n"
               : LOOM_WG_OUT256
               : "l"(da), "l"(db), "r"(1));
#endif
}

// T: unsigned short (bfloat16 bits) or float (TF32, both operands K-major:
// wgmma has no transposed TF32 form).
template <class T, int BM, int BN, int STAGES, bool AK, bool AV, bool BKM, bool BV>
struct LoomGemmWg {
  enum {
    ES = (int)sizeof(T),
    BK = 128 / ES,     // one 128-byte row: 64 bfloat16 or 32 floats
    CE = 16 / ES,      // elements per 16-byte chunk
    THREADS = 2 * BM,  // BM / 64 warpgroups of 128
    A_BYTES = BM * 128,
    B_BYTES = BN * 128,
    STAGE_BYTES = A_BYTES + B_BYTES,
    SMEM_BYTES = STAGES * STAGE_BYTES + 1024,  // dynamic shared memory the launch must give
    ACC = BN / 2,                              // sums per thread
  };
  static_assert(ES == 2 || (ES == 4 && !AK && !BKM), "LoomGemmWg: TF32 reads both operands K-major");
  static_assert(AV && BV, "LoomGemmWg: both operands are copied 16 bytes at a time");
  static_assert(BM == 64 || BM == 128, "LoomGemmWg: one or two warpgroups");
  static_assert(BN == 128 || BN == 256, "LoomGemmWg: m64n128k16 or m64n256k16");
  static_assert(STAGES >= 3, "LoomGemmWg: two slices in flight besides the one in use");
#if defined(__CUDA_ARCH__) && !defined(LOOM_WGMMA)
  static_assert(BM < 0, "LoomGemmWg: wgmma needs code compiled for sm_90a");
#endif

  // Rows [r0, r0 + R) by k [k0, k0 + BK) of an operand (A: rows are m; B:
  // n) into its tile at shared address `dst`, as laid out above. MN: the
  // operand is contiguous along its rows. Consecutive threads copy
  // consecutive chunks of the contiguous dim; out of range: zeros.
  template <int R, bool MN>
  static __device__ __forceinline__ void copy(unsigned dst, const T* src, loom_i64 rows, loom_i64 r0, loom_i64 s_r,
                                              loom_i64 s_k, loom_i64 K, loom_i64 k0) {
    static_assert(R * 8 % THREADS == 0, "LoomGemmWg: whole chunks per thread");
#pragma unroll
    for (int j = 0; j < R * 8 / THREADS; ++j) {
      const int i = threadIdx.x + j * THREADS;
      int at;
      loom_i64 gr, gk, room;
      if (MN) {  // i = (k, chunk of the rows); bfloat16 only
        const int k = i / (R / 8), c = i % (R / 8);
        at = (c / 8) * 8192 + k * 128 + (((c % 8) ^ (k % 8)) << 4);
        gr = r0 + c * 8, gk = k0 + k;
        room = gk < K ? rows - gr : 0;
      } else {  // i = (row, chunk of k)
        const int r = i / 8, c = i % 8;
        at = r * 128 + ((c ^ (r % 8)) << 4);
        gr = r0 + r, gk = k0 + c * CE;
        room = gr < rows ? K - gk : 0;
      }
      const int valid = room <= 0 ? 0 : room >= CE ? CE : (int)room;
      loom_cp16_at(dst + at, valid ? src + gr * s_r + gk * s_k : src, valid * ES);
    }
  }

  template <class Epi, class Load>
  static __device__ __forceinline__ void run_with(const T* A, const T* B, const LoomGemmArgs& ga, Epi epi,
                                                  Load epi_loads) {
    run(A, B, ga, [&](loom_i64 b, loom_i64 m, loom_i64 n, float v) { epi(b, m, n, v, epi_loads(b, m, n)); });
  }
  // The whole block, as LoomGemmBf16::run: split-K range, grouped tile, the
  // pipeline above, then the epilogue from the accumulators.
  template <class Epi>
  static __device__ __forceinline__ void run(const T* A, const T* B, const LoomGemmArgs& ga, Epi epi,
                                             loom_i64 kchunk = 0) {
    LoomGemmArgs g = ga;
    loom_i64 m0, n0;
    const loom_i64 batch = loom_gemm_block(A, B, g, kchunk, BM, BN, m0, n0);
    extern __shared__ __align__(16) unsigned char loom_gemm_smem[];
    const unsigned base = (loom_smem_addr(loom_gemm_smem) + 1023u) & ~1023u;
    const loom_i64 KT = (g.K + BK - 1) / BK;
    auto fill = [&](loom_i64 kt) {
      const unsigned stage = base + (unsigned)(kt % STAGES) * STAGE_BYTES;
      copy<BM, AK>(stage, A, g.M, m0, g.a_m, g.a_k, g.K, kt * BK);
      copy<BN, BKM>(stage + A_BYTES, B, g.N, n0, g.b_n, g.b_k, g.K, kt * BK);
    };
    float acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
    const int wg = threadIdx.x / 128;
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
      if (s < KT) fill(s);
      loom_cp_commit();
    }
    for (loom_i64 kt = 0; kt < KT; ++kt) {
      loom_cp_wait<STAGES - 3>();
      loom_fence_async_shared();
      __syncthreads();
      if (kt + STAGES - 2 < KT) fill(kt + STAGES - 2);
      loom_cp_commit();
      // Warpgroup wg's 64 rows of A: 64 K-major rows or one MN-major block, 8 KB either way.
      const unsigned stage = base + (unsigned)(kt % STAGES) * STAGE_BYTES, a = stage + wg * 8192, b = stage + A_BYTES;
      loom_wg_hold(acc);
      loom_wg_fence();
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // 32 bytes of k per instruction: 16 bfloat16 or 8 floats
        const unsigned long long da = loom_wg_desc(a + (AK ? j * 2048 : j * 32), AK ? 8192 : 16, 1024);
        const unsigned long long db = loom_wg_desc(b + (BKM ? j * 2048 : j * 32), BKM ? 8192 : 16, 1024);
        if constexpr (ES == 4 && BN == 256) loom_wg_tf32_256(acc, da, db);
        else if constexpr (ES == 4) loom_wg_tf32_128(acc, da, db);
        else if constexpr (BN == 256) loom_wg_bf16_256<AK, BKM>(acc, da, db);
        else loom_wg_bf16_128<AK, BKM>(acc, da, db);
      }
      loom_wg_commit();
      loom_wg_wait<1>();
      loom_wg_hold(acc);
    }
    loom_wg_wait<0>();
    loom_wg_hold(acc);
    loom_cp_wait<0>();
    // acc[4 i + q] (PTX ISA, wgmma .m64nNk16 accumulator D): warp w of the
    // warpgroup, lane l: row 16 w + l / 4 (+ 8 for q >= 2), column
    // 8 i + 2 (l % 4) + q % 2.
    const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const loom_i64 row = m0 + wg * 64 + w * 16 + lane / 4, col = n0 + 2 * (lane % 4);
#pragma unroll
    for (int i = 0; i < BN / 8; ++i)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const loom_i64 gm = row + (q >= 2 ? 8 : 0), gn = col + 8 * i + (q & 1);
        if (gm < g.M && gn < g.N) epi(batch, gm, gn, acc[4 * i + q]);
      }
  }
};
