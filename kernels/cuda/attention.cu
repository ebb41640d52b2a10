// Fused scaled-dot-product attention for bfloat16 (and float16: F16) on tensor cores
// (FlashAttention-2 style): forward, and backward in three kernels. Compiled
// by NVRTC after kernels/cuda/bfloat16.cuh (loom_bf16_*), with builtins only:
// no includes, 64-bit integers as long long.
//
// Semantics are PyTorch's F.scaled_dot_product_attention with a mask given
// as code (a functor, below) and Dv = D:
//   q [B,H,L,D], k [B,H,S,D], v [B,H,S,D] -> out [B,H,L,D]
//   s[i,j] = scale * q[i]·k[j], -inf where the mask hides (i, j);
//   out[i] = sum_j softmax_j(s[i,:]) v[j], softmax in float32.
// Departure from PyTorch: a query row that sees no key at all gets out = 0,
// LSE = -inf and zero gradients (PyTorch gives NaN), so a padded or
// windowed batch never poisons a whole step.
//
// Layout: every bf16 tensor is addressed by element strides (batch, head,
// seq) with D contiguous, so q/k/v may be views into one fused projection
// ([B,T,3,H,D]: seq stride 3HD, head stride D) and out/dq/dk/dv may be views
// too. Copies are 16-byte cp.async: base pointers must be 16-byte aligned
// and strides multiples of 8 elements. LSE and Delta are float32
// [B*H, L], contiguous. bh = b*H + h.
//
// ---------------------------------------------------------------------------
// extern "C" entry points (bf16, D = 64; MASK is none, causal or window).
// (loom's own entry points, with a mask tensor too, are attention_library.cu's.)
// All take the same plain argument list, in this order:
//   fwd:     q, k, v, out, lse,
//            q_b, q_h, q_s, k_b, k_h, k_s, v_b, v_h, v_s, o_b, o_h, o_s,
//            L, S, H, scale, window
//   bwd_pre: out, dout, delta, o_b, o_h, o_s, do_b, do_h, do_s, L, H, B*H
//   bwd_dkdv / bwd_dq:
//            q, k, v, dout, lse, delta, dq, dk, dv,
//            q_b, q_h, q_s, k_b, k_h, k_s, v_b, v_h, v_s, do_b, do_h, do_s,
//            dq_b, dq_h, dq_s, dk_b, dk_h, dk_s, dv_b, dv_h, dv_s,
//            L, S, H, scale, window
// (pointers are unsigned short* for bf16 and float* for lse/delta; strides,
// L, S and window long long; H int; scale float; window is read only by
// the window mask: key j is visible to query i when i - window < j <= i.)
//
//   loom_attention_fwd_d64_MASK      grid (B*H, ceil(L/128)), block 256,
//                                    dynamic shared memory 55296 bytes
//   loom_attention_bwd_pre_d64       grid (ceil(B*H*L*8/256)), block 256, none
//                                    (Delta = rowsum(dout * out), float32)
//   loom_attention_bwd_dkdv_d64_MASK grid (B*H, ceil(S/64)), block 128,
//                                    dynamic shared memory 56320 bytes
//   loom_attention_bwd_dq_d64_MASK   grid (B*H, ceil(L/64)), block 128,
//                                    dynamic shared memory 55296 bytes
// Backward order: bwd_pre, then bwd_dkdv and bwd_dq (independent of each
// other; both read Delta). Shared memory above 48 KiB needs
// cudaFuncAttributeMaxDynamicSharedMemorySize (cuFuncSetAttribute).
//
// Backward scheme: deterministic. dK/dV per key tile looping over query
// tiles, and a separate dQ kernel per query tile looping over key tiles.
// This recomputes S, P and dP once more (7 tile products per tile pair
// instead of 5) but needs no float32 dQ workspace, no zeroing or
// conversion pass, and gives bitwise-repeatable gradients; on an H200,
// causal [8,12,1024,64], it costs 0.217 ms against 0.200 ms (8%). The atomic
// alternative (dQ accumulated with red.global.add into a float32 buffer by
// the dK/dV kernel, then loom_attention_dq_convert) is kept as
// LoomAttnBwdKV<..., DQ_ATOMIC = true> so the two can be timed against
// each other (bench/micro/flash_attention.cu does).
//
// Templates (usable directly, e.g. by generated code): LoomAttnFwd,
// LoomAttnBwdKV, LoomAttnBwdQ, loom_attn_bwd_pre, with generic __global__
// wrappers loom_attention_*_kernel<...>(LoomAttnArgs, Mask). Their SMEM_BYTES
// and THREADS enums give the launch.
//
// ---------------------------------------------------------------------------
// Masks. The mask lives only in a functor; the kernels never read a mask
// tensor. A functor provides, for a block of query rows [i0, i1] (inclusive):
//   visible(i, j)       true when query i may attend to key j;
//   key_begin(i0, i1)   keys below it are hidden from every row in [i0, i1];
//   key_end(i0, i1)     keys from it on are hidden from every row;
//   full_begin(i0, i1), full_end(i0, i1): keys in [full_begin, full_end)
//                       are visible to every row in [i0, i1] (may be empty);
//   for_head(b, h)      the functor for one (batch, head), e.g. to pick a
//                       per-batch length; called once per block.
// Key tiles outside [key_begin, key_end) are skipped; tiles inside
// [full_begin, full_end) (and inside L x S) run without any mask test; only
// the others call visible() per element. A functor that knows nothing
// about its shape may return key range [0, 2^62) and an empty full range:
// every tile is then evaluated element by element, still correct.

struct LoomAttnNoMask {
  __device__ __forceinline__ LoomAttnNoMask for_head(long long, long long) const { return *this; }
  __device__ __forceinline__ bool visible(long long, long long) const { return true; }
  __device__ __forceinline__ long long key_begin(long long, long long) const { return 0; }
  __device__ __forceinline__ long long key_end(long long, long long) const { return 1LL << 62; }
  __device__ __forceinline__ long long full_begin(long long, long long) const { return 0; }
  __device__ __forceinline__ long long full_end(long long, long long) const { return 1LL << 62; }
};

// Top-left aligned as torch.ones(L, S).tril(): key j <= query i, whatever L and S.
struct LoomAttnCausal {
  __device__ __forceinline__ LoomAttnCausal for_head(long long, long long) const { return *this; }
  __device__ __forceinline__ bool visible(long long i, long long j) const { return j <= i; }
  __device__ __forceinline__ long long key_begin(long long, long long) const { return 0; }
  __device__ __forceinline__ long long key_end(long long, long long i1) const { return i1 + 1; }
  __device__ __forceinline__ long long full_begin(long long, long long) const { return 0; }
  __device__ __forceinline__ long long full_end(long long i0, long long) const { return i0 + 1; }
};

// Sliding-window causal: i - window < j <= i (window >= 1 keys, the query's own included).
struct LoomAttnWindow {
  long long window;
  __device__ __forceinline__ LoomAttnWindow for_head(long long, long long) const { return *this; }
  __device__ __forceinline__ bool visible(long long i, long long j) const { return j <= i && j > i - window; }
  __device__ __forceinline__ long long key_begin(long long i0, long long) const { return i0 - window + 1; }
  __device__ __forceinline__ long long key_end(long long, long long i1) const { return i1 + 1; }
  __device__ __forceinline__ long long full_begin(long long, long long i1) const { return i1 - window + 1; }
  __device__ __forceinline__ long long full_end(long long i0, long long) const { return i0 + 1; }
};

// A bool mask tensor besides another functor's code (ir::AttentionMaskPlanes
// in ir/node.h): batch b reads plane (b / divisor) % planes of [planes,
// rows, S] bytes, row i (rows = L) or row 0 (rows = 1). Nothing about its
// keys is known ahead, so each warp reads its tile's bytes first
// (loom_attn_refine): a tile it hides wholly is skipped, one it shows
// wholly runs without a test, only the rest is tested per element.
template <class Code>
struct LoomAttnPlanes {
  Code code;
  const unsigned char* data;
  long long planes, rows, S, divisor;
  __device__ __forceinline__ LoomAttnPlanes for_head(long long b, long long h) const {
    LoomAttnPlanes m = *this;
    m.code = code.for_head(b, h);
    m.data = data + (b / divisor) % planes * rows * S;
    return m;
  }
  __device__ __forceinline__ bool seen(long long i, long long j) const { return data[(rows == 1 ? 0 : i * S) + j] != 0; }
  __device__ __forceinline__ bool visible(long long i, long long j) const { return code.visible(i, j) && seen(i, j); }
  __device__ __forceinline__ long long key_begin(long long i0, long long i1) const { return code.key_begin(i0, i1); }
  __device__ __forceinline__ long long key_end(long long i0, long long i1) const { return code.key_end(i0, i1); }
  __device__ __forceinline__ long long full_begin(long long, long long) const { return 0; }
  __device__ __forceinline__ long long full_end(long long, long long) const { return 0; }
};

// Everything a kernel may need; each reads its part. Strides in elements.
struct LoomAttnArgs {
  const unsigned short *q, *k, *v;
  unsigned short* o;  // forward writes it, the backward preprocess reads it
  const unsigned short* dout;
  unsigned short *dq, *dk, *dv;
  float* lse;     // [B*H, L]
  float* delta;   // [B*H, L]
  float* dq_acc;  // [B*H, L, D] float32, atomic dQ scheme only
  // Where set, the output in float32 instead of o / dq / dk / dv (loom's
  // library entry points, kernels/cuda/attention_library.cu: the
  // accumulators as they are, the caller rounds where it reads them).
  float *o32, *dq32, *dk32, *dv32;
  long long q_b, q_h, q_s, k_b, k_h, k_s, v_b, v_h, v_s, o_b, o_h, o_s;
  long long do_b, do_h, do_s, dq_b, dq_h, dq_s, dk_b, dk_h, dk_s, dv_b, dv_h, dv_s;
  long long L, S;
  int H;
  float scale;
};

// ---------------------------------------------------------------------------
// PTX helpers (named apart from the GEMM template's so both can share a
// translation unit).

__device__ __forceinline__ unsigned loom_attn_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// 16 bytes, of which `bytes` come from global memory; the rest are zeros.
__device__ __forceinline__ void loom_attn_cp16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(loom_attn_smem_addr(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void loom_attn_cp4(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(loom_attn_smem_addr(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void loom_attn_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void loom_attn_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// ldmatrix.x4 (see LoomGemmBf16 in gemm_template.cu for the fragment map).
// volatile without a memory operand: __syncthreads orders it against the
// copies and stores.
template <bool TRANS>
__device__ __forceinline__ void loom_attn_ldsm(unsigned (&r)[4], const void* p) {
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(loom_attn_smem_addr(p)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(loom_attn_smem_addr(p)));
}

// F16: the operands are float16 rather than bfloat16 (the kernels are the
// same but for this instruction and the packing below).
template <bool F16>
__device__ __forceinline__ void loom_attn_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (F16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats to a bf16 (or f16) pair, round to nearest even, lo in the low
// half (the element with the lower index, as mma fragments want).
template <bool F16>
__device__ __forceinline__ unsigned loom_attn_pack(float lo, float hi) {
  unsigned r;
  if constexpr (F16)
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 2^x in one MUFU op; 2^-inf = 0, which is what masked scores rely on.
__device__ __forceinline__ float loom_attn_ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float loom_attn_neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float loom_attn_pos_inf() { return __int_as_float(0x7f800000); }

// LSE (natural log) to the log2 domain the kernels exponentiate in. A row
// that saw no key (-inf) becomes +inf, so that every p = 2^(x - lse2) of it
// is 0 and its gradients vanish instead of 2^(+inf).
__device__ __forceinline__ float loom_attn_lse2(float lse) {
  return lse == loom_attn_neg_inf() ? loom_attn_pos_inf() : lse * 1.4426950408889634f;
}

// ---------------------------------------------------------------------------
// Warp-level tile products. A warp owns 16 rows; fragments as in
// LoomGemmBf16 (g = lane / 4, t = lane % 4): accumulator c[n][0..1] is
// (row g, cols 8n + 2t, +1), c[n][2..3] the same of row g + 8.
// Shared tiles are row-major with a padded leading dimension (D + 8 or
// 64 + 8 elements): a row is 16 * odd bytes, so the 8 rows one ldmatrix
// phase reads fall in 8 different 16-byte bank groups.

// a[KS] = the 16 x 16KS A operand, A(m, k) = As[m * ld + k].
template <int KS>
__device__ __forceinline__ void loom_attn_load_a(unsigned (&a)[KS][4], const unsigned short* As, int ld) {
  const int lane = threadIdx.x % 32, mat = lane / 8, r = lane % 8;
  const unsigned short* p = As + ((mat % 2) * 8 + r) * ld + (mat / 2) * 8;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) loom_attn_ldsm<false>(a[kk], p + kk * 16);
}
// The same from a transposed tile, A(m, k) = As[k * ld + m].
template <int KS>
__device__ __forceinline__ void loom_attn_load_a_t(unsigned (&a)[KS][4], const unsigned short* As, int ld) {
  const int lane = threadIdx.x % 32, mat = lane / 8, r = lane % 8;
  const unsigned short* p = As + ((mat / 2) * 8 + r) * ld + (mat % 2) * 8;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) loom_attn_ldsm<true>(a[kk], p + kk * 16 * ld);
}

// c (16 x 8NT) += a (16 x 16KS) * B with B(k, n) = Bs[n * ld + k]: B's rows
// are the product's columns (K for q·kᵀ).
template <int KS, int NT, bool F16 = false>
__device__ __forceinline__ void loom_attn_mma_nk(float (&c)[NT][4], const unsigned (&a)[KS][4], const unsigned short* Bs,
                                                 int ld) {
  const int lane = threadIdx.x % 32, mat = lane / 8, r = lane % 8;
  const unsigned short* p = Bs + ((mat / 2) * 8 + r) * ld + (mat % 2) * 8;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk)
#pragma unroll
    for (int nj = 0; nj < NT / 2; ++nj) {
      unsigned f[4];
      loom_attn_ldsm<false>(f, p + nj * 16 * ld + kk * 16);
      loom_attn_mma<F16>(c[2 * nj], a[kk], f[0], f[1]);
      loom_attn_mma<F16>(c[2 * nj + 1], a[kk], f[2], f[3]);
    }
}
// The same with A read from shared memory one k16 step at a time
// (A(m, k) = As[m * lda + k]), for operands too large to keep in registers.
template <int KS, int NT, bool F16 = false>
__device__ __forceinline__ void loom_attn_mma_nk_sa(float (&c)[NT][4], const unsigned short* As, int lda,
                                                    const unsigned short* Bs, int ld) {
  const int lane = threadIdx.x % 32, mat = lane / 8, r = lane % 8;
  const unsigned short* pa = As + ((mat % 2) * 8 + r) * lda + (mat / 2) * 8;
  const unsigned short* p = Bs + ((mat / 2) * 8 + r) * ld + (mat % 2) * 8;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    unsigned a[4];
    loom_attn_ldsm<false>(a, pa + kk * 16);
#pragma unroll
    for (int nj = 0; nj < NT / 2; ++nj) {
      unsigned f[4];
      loom_attn_ldsm<false>(f, p + nj * 16 * ld + kk * 16);
      loom_attn_mma<F16>(c[2 * nj], a, f[0], f[1]);
      loom_attn_mma<F16>(c[2 * nj + 1], a, f[2], f[3]);
    }
  }
}
// c += a * B with B(k, n) = Bs[k * ld + n]: B's rows are the reduction
// (V for p·v), read with .trans.
template <int KS, int NT, bool F16 = false>
__device__ __forceinline__ void loom_attn_mma_kn(float (&c)[NT][4], const unsigned (&a)[KS][4], const unsigned short* Bs,
                                                 int ld) {
  const int lane = threadIdx.x % 32, mat = lane / 8, r = lane % 8;
  const unsigned short* p = Bs + ((mat % 2) * 8 + r) * ld + (mat / 2) * 8;
#pragma unroll
  for (int kk = 0; kk < KS; ++kk)
#pragma unroll
    for (int nj = 0; nj < NT / 2; ++nj) {
      unsigned f[4];
      loom_attn_ldsm<true>(f, p + kk * 16 * ld + nj * 16);
      loom_attn_mma<F16>(c[2 * nj], a[kk], f[0], f[1]);
      loom_attn_mma<F16>(c[2 * nj + 1], a[kk], f[2], f[3]);
    }
}

// The FA2 register trick: an accumulator (16 x 8NT, float) is, pairwise,
// already laid out as the A operand of the next product (16 x 16(NT/2)):
// A's k-block kk is accumulator tiles 2kk (k 0..7) and 2kk + 1 (k 8..15).
template <int NT, bool F16 = false>
__device__ __forceinline__ void loom_attn_to_a(unsigned (&a)[NT / 2][4], const float (&c)[NT][4]) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    a[kk][0] = loom_attn_pack<F16>(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = loom_attn_pack<F16>(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = loom_attn_pack<F16>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = loom_attn_pack<F16>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

template <int NT>
__device__ __forceinline__ void loom_attn_zero(float (&c)[NT][4]) {
#pragma unroll
  for (int n = 0; n < NT; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.f;
}

// Rows [r0, r0 + R) x D of a strided tensor into a [R][D + 8] tile, one
// 16-byte cp.async per chunk; rows at or past `rows` are zero-filled.
template <int R, int D, int THREADS>
__device__ __forceinline__ void loom_attn_load_rows(unsigned short* dst, const unsigned short* src, long long stride,
                                                    long long r0, long long rows) {
  enum { CPR = D / 8, N = R * CPR, LD = D + 8 };
#pragma unroll
  for (int i = 0; i < (N + THREADS - 1) / THREADS; ++i) {
    const int c = (int)threadIdx.x + i * THREADS;
    if (N % THREADS == 0 || c < N) {
      const int r = c / CPR, col = (c % CPR) * 8;
      const long long gr = r0 + r;
      const bool ok = gr < rows;
      loom_attn_cp16(dst + r * LD + col, ok ? src + gr * stride + col : src, ok ? 16 : 0);
    }
  }
}

// A warp's 16 rows x D of float accumulators, times `mul`, as bf16 into its
// own rows of a [.][D + 8] shared tile and then to global memory (16-byte
// stores of whole row chunks instead of 4-byte pairs). The caller makes
// sure no other warp still reads those shared rows.
template <int D, bool F16 = false>
__device__ __forceinline__ void loom_attn_store_rows(const float (&c)[D / 8][4], float mul, unsigned short* stage,
                                                     unsigned short* dst, long long stride, long long r0,
                                                     long long rows) {
  enum { LD = D + 8, CPR = D / 8 };
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    *reinterpret_cast<unsigned*>(stage + g * LD + n * 8 + 2 * t) = loom_attn_pack<F16>(c[n][0] * mul, c[n][1] * mul);
    *reinterpret_cast<unsigned*>(stage + (g + 8) * LD + n * 8 + 2 * t) = loom_attn_pack<F16>(c[n][2] * mul, c[n][3] * mul);
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16 * CPR / 32; ++i) {
    const int e = lane + 32 * i, r = e / CPR, col = (e % CPR) * 8;
    if (r0 + r < rows)
      *reinterpret_cast<uint4*>(dst + (r0 + r) * stride + col) = *reinterpret_cast<const uint4*>(stage + r * LD + col);
  }
}

// The same rows in float32, stored from the registers: row g's pairs
// (cols 8n + 2t, +1) as 8-byte stores.
template <int D>
__device__ __forceinline__ void loom_attn_store_rows_f32(const float (&c)[D / 8][4], float mul, float* dst,
                                                        long long stride, long long r0, long long rows) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    if (r0 + g < rows)
      *reinterpret_cast<float2*>(dst + (r0 + g) * stride + n * 8 + 2 * t) = make_float2(c[n][0] * mul, c[n][1] * mul);
    if (r0 + g + 8 < rows)
      *reinterpret_cast<float2*>(dst + (r0 + g + 8) * stride + n * 8 + 2 * t) = make_float2(c[n][2] * mul, c[n][3] * mul);
  }
}

// The first query row of this block (blockIdx.y): the last query tiles
// first, since under a causal mask they have the most keys, and starting
// them early keeps the tail of the grid short.
template <int BM>
__device__ __forceinline__ long long loom_attn_query_block(long long L) {
  return ((L + BM - 1) / BM - 1 - (long long)blockIdx.y) * BM;
}
// The key tiles [t0, t1) of BN keys that query rows [q0, qlast] may see.
template <int BN, class Mask>
__device__ __forceinline__ void loom_attn_key_tiles(const Mask& mask, long long q0, long long qlast, long long S,
                                                    long long& t0, long long& t1) {
  long long kb = mask.key_begin(q0, qlast), ke = mask.key_end(q0, qlast);
  kb = kb < 0 ? 0 : kb;
  ke = ke > S ? S : ke;
  t0 = kb / BN;
  t1 = ke > kb ? (ke + BN - 1) / BN : t0;
}

// What a (query block, key block) pair needs: 0 = nothing (every pair
// hidden), 1 = a per-element mask test, 2 = no test (every pair visible).
// [i0, i1] and [j0, j1] inclusive, clipped to L and S.
template <class Mask>
__device__ __forceinline__ int loom_attn_tile_kind(const Mask& m, long long i0, long long i1, long long j0,
                                                   long long j1) {
  if (j1 < m.key_begin(i0, i1) || j0 >= m.key_end(i0, i1)) return 0;
  return j0 >= m.full_begin(i0, i1) && j1 < m.full_end(i0, i1) ? 2 : 1;
}

// A mask as code knows its tiles from its ranges: nothing to refine.
template <bool KEY_ROWS, int NT, class Mask>
__device__ __forceinline__ int loom_attn_refine(const Mask&, int k, long long, long long, long long, long long) {
  return k;
}
// A mask tensor is read: the warp's tile as queries x keys (keys lie
// contiguous in a plane's row), 8 keys a load, every load of a lane in
// flight at once, then two votes. 0 when the tensor hides every pair, 2
// when the code showed every pair (k == 2) and the tensor does too, else 1.
// Called by the whole warp (the tile's coordinates are the warp's).
template <bool KEY_ROWS, int NT, class Code>
__device__ __forceinline__ int loom_attn_refine(const LoomAttnPlanes<Code>& m, int k, long long r0, long long c0,
                                                long long rows_n, long long cols_n) {
  constexpr int kQueries = KEY_ROWS ? 8 * NT : 16, kKeys = KEY_ROWS ? 16 : 8 * NT, kSegs = kQueries * kKeys / 8;
  const long long q0 = KEY_ROWS ? c0 : r0, k0 = KEY_ROWS ? r0 : c0;
  const long long q_end = KEY_ROWS ? cols_n : rows_n, k_end = KEY_ROWS ? rows_n : cols_n;
  const int lane = threadIdx.x % 32;
  bool any = false, all = true;
#pragma unroll
  for (int t = 0; t < (kSegs + 31) / 32; ++t) {
    const int seg = lane + 32 * t;
    const long long q = q0 + seg / (kKeys / 8), kk = k0 + seg % (kKeys / 8) * 8;
    if (seg >= kSegs || q >= q_end || kk >= k_end) continue;
    const unsigned char* p = m.data + (m.rows == 1 ? 0 : q * m.S) + kk;
    if (kk + 8 <= k_end && ((unsigned long long)p & 7) == 0) {
      const uint2 w = *(const uint2*)p;
      // A word has a zero byte where (w - 0x01..) & ~w & 0x80.. is nonzero.
      const unsigned zero = ((w.x - 0x01010101u) & ~w.x) | ((w.y - 0x01010101u) & ~w.y);
      any = any || (w.x | w.y) != 0;
      all = all && (zero & 0x80808080u) == 0;
    } else {
      for (int x = 0; x < 8 && kk + x < k_end; ++x) {
        const bool v = p[x] != 0;
        any = any || v;
        all = all && v;
      }
    }
  }
  any = __any_sync(0xffffffffu, any);
  all = __all_sync(0xffffffffu, all);
  return !any ? 0 : k == 2 && all ? 2 : 1;
}

// What one warp's 16 accumulator rows need against a block of columns:
// rows [r0, r0 + 15] and columns [c0, c0 + 8NT) before clipping to their
// extents (rows_n, cols_n). 0: every pair hidden (the warp skips the
// tile), 1: a per-element test, 2: none. Per warp rather than per block
// because a diagonal tile is partial for the block but, for most warps,
// wholly visible or wholly hidden.
template <bool KEY_ROWS, int NT, class Mask>
__device__ __forceinline__ int loom_attn_warp_kind(const Mask& m, long long r0, long long c0, long long rows_n,
                                                   long long cols_n) {
  if (r0 >= rows_n || c0 >= cols_n) return 0;
  const long long r1 = (r0 + 16 < rows_n ? r0 + 16 : rows_n) - 1, c1 = (c0 + 8 * NT < cols_n ? c0 + 8 * NT : cols_n) - 1;
  int k = KEY_ROWS ? loom_attn_tile_kind(m, c0, c1, r0, r1) : loom_attn_tile_kind(m, r0, r1, c0, c1);
  // Pairs past either extent must read as hidden: only a test gives that.
  if (k == 2 && (r0 + 16 > rows_n || c0 + 8 * NT > cols_n)) k = 1;
  return k == 0 ? 0 : loom_attn_refine<KEY_ROWS, NT>(m, k, r0, c0, rows_n, cols_n);
}

// x[n][e] = -inf where the pair is hidden or out of range. Rows of the
// accumulator are queries (KEY_ROWS false) or keys (true). The tests run
// in a loop rolled over the n8 tiles, into a bit mask, and only then touch
// x: fully unrolled, the 32 64-bit index computations and functor calls
// sat beside the live accumulators and spilled the forward at 128
// registers.
template <bool KEY_ROWS, int NT, class Mask>
__device__ __forceinline__ void loom_attn_apply_mask(float (&x)[NT][4], const Mask& m, long long row0, long long col0,
                                                     long long L, long long S) {
  static_assert(NT * 4 <= 32, "loom_attn_apply_mask: one bit per element of a thread");
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const long long ra = row0 + g, rb = ra + 8;
  unsigned hidden = 0;
#pragma unroll 1
  for (int n = 0; n < NT; ++n) {
    const long long ca = col0 + n * 8 + 2 * t, cb = ca + 1;
    unsigned bits;
    if (KEY_ROWS)  // rows are keys j, columns queries i
      bits = (ca >= L || ra >= S || !m.visible(ca, ra) ? 1u : 0u) | (cb >= L || ra >= S || !m.visible(cb, ra) ? 2u : 0u) |
             (ca >= L || rb >= S || !m.visible(ca, rb) ? 4u : 0u) | (cb >= L || rb >= S || !m.visible(cb, rb) ? 8u : 0u);
    else
      bits = (ra >= L || ca >= S || !m.visible(ra, ca) ? 1u : 0u) | (ra >= L || cb >= S || !m.visible(ra, cb) ? 2u : 0u) |
             (rb >= L || ca >= S || !m.visible(rb, ca) ? 4u : 0u) | (rb >= L || cb >= S || !m.visible(rb, cb) ? 8u : 0u);
    hidden |= bits << (4 * n);
  }
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if ((hidden >> (n * 4 + e)) & 1u) x[n][e] = loom_attn_neg_inf();
}

// ---------------------------------------------------------------------------
// Forward. A block: BM = 16 * WARPS query rows of one (b, h), each warp 16
// rows with its q fragments in registers; it walks the visible key tiles
// (BN = 64) with K and V double-buffered by cp.async, K and V in separate
// copy groups so that q·kᵀ of tile n runs while V of tile n still lands.
// Online softmax in float32, in the log2 domain (scores pre-multiplied by
// scale * log2 e so each exponential is one ex2); P goes to bf16 straight
// from the score accumulators as the A operand of p·v. The output row is
// divided by its sum once, at the end.
template <int D, class Mask, int WARPS = 8, bool F16 = false>
struct LoomAttnFwd {
  enum {
    BM = 16 * WARPS,
    BN = 64,
    LD = D + 8,
    THREADS = 32 * WARPS,
    KS = D / 16,  // k16 steps of q·kᵀ
    DT = D / 8,   // n8 tiles of the output
    NT = BN / 8,  // n8 tiles of a score tile
    Q_ELEMS = BM * LD,
    KV_ELEMS = BN * LD,
    SMEM_BYTES = 2 * (Q_ELEMS + 4 * KV_ELEMS),
    // 128 registers a thread up to D = 64: 16 warps an SM. On an H200,
    // [8,12,1024,64]: 8 warps x 2 blocks tie 4 x 4 causal (0.079 ms) and
    // beat it without a mask (0.124 against 0.133 ms).
    MIN_BLOCKS = (D <= 64 ? 512 : 256) / THREADS,
  };
  static_assert(D % 16 == 0 && D >= 32 && D <= 128, "LoomAttnFwd: D is 32, 48, ..., 128");

  static __device__ __forceinline__ void run(const LoomAttnArgs& a, const Mask& mask_all) {
    extern __shared__ __align__(16) unsigned char loom_attn_smem[];
    unsigned short* sQ = reinterpret_cast<unsigned short*>(loom_attn_smem);
    unsigned short* sK = sQ + Q_ELEMS;
    unsigned short* sV = sK + 2 * KV_ELEMS;
    const long long L = a.L, S = a.S;
    const long long bh = blockIdx.x, b = bh / a.H, h = bh - b * a.H;
    const long long q0 = loom_attn_query_block<BM>(L), qlast = (q0 + BM < L ? q0 + BM : L) - 1;
    const Mask mask = mask_all.for_head(b, h);
    const unsigned short* q = a.q + b * a.q_b + h * a.q_h;
    const unsigned short* k = a.k + b * a.k_b + h * a.k_h;
    const unsigned short* v = a.v + b * a.v_b + h * a.v_h;
    long long t0, t1;
    loom_attn_key_tiles<BN>(mask, q0, qlast, S, t0, t1);

    loom_attn_load_rows<BM, D, THREADS>(sQ, q, a.q_s, q0, L);
    if (t0 < t1) loom_attn_load_rows<BN, D, THREADS>(sK, k, a.k_s, t0 * BN, S);
    loom_attn_commit();
    if (t0 < t1) loom_attn_load_rows<BN, D, THREADS>(sV, v, a.v_s, t0 * BN, S);
    loom_attn_commit();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
    const long long row0 = q0 + warp * 16;
    const float c = a.scale * 1.4426950408889634f;
    unsigned qa[KS][4];
    float o[DT][4];
    loom_attn_zero(o);
    float m0 = loom_attn_neg_inf(), m1 = loom_attn_neg_inf(), l0 = 0.f, l1 = 0.f;
    int buf = 0;
    for (long long kt = t0; kt < t1; ++kt) {
      const long long k0 = kt * BN;
      loom_attn_wait<1>();  // K of this tile (V may still land)
      __syncthreads();
      if (kt == t0) loom_attn_load_a<KS>(qa, sQ + warp * 16 * LD, LD);
      const int kind = loom_attn_warp_kind<false, NT>(mask, row0, k0, L, S);
      float s[NT][4];
      loom_attn_zero(s);
      if (kind) loom_attn_mma_nk<KS, NT, F16>(s, qa, sK + buf * KV_ELEMS, LD);
      // The other K buffer was last read by tile kt - 1, before the barrier.
      if (kt + 1 < t1) loom_attn_load_rows<BN, D, THREADS>(sK + (buf ^ 1) * KV_ELEMS, k, a.k_s, k0 + BN, S);
      loom_attn_commit();
      if (kind) {  // else the warp's rows see none of this tile: nothing changes
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[n][e] *= c;
        if (kind == 1) loom_attn_apply_mask<false>(s, mask, row0, k0, L, S);

        // Row maxima over the quad that shares a row, then rescale.
        float x0 = loom_attn_neg_inf(), x1 = loom_attn_neg_inf();
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          x0 = fmaxf(x0, fmaxf(s[n][0], s[n][1]));
          x1 = fmaxf(x1, fmaxf(s[n][2], s[n][3]));
        }
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
        x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
        x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
        const float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
        // A row with no visible key so far subtracts 0, not -inf (-inf - -inf is NaN).
        const float b0 = n0 == loom_attn_neg_inf() ? 0.f : n0, b1 = n1 == loom_attn_neg_inf() ? 0.f : n1;
        const float al0 = loom_attn_ex2(m0 - b0), al1 = loom_attn_ex2(m1 - b1);
        m0 = n0, m1 = n1;
        l0 *= al0, l1 *= al1;
#pragma unroll
        for (int d = 0; d < DT; ++d) o[d][0] *= al0, o[d][1] *= al0, o[d][2] *= al1, o[d][3] *= al1;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          s[n][0] = loom_attn_ex2(s[n][0] - b0), s[n][1] = loom_attn_ex2(s[n][1] - b0);
          s[n][2] = loom_attn_ex2(s[n][2] - b1), s[n][3] = loom_attn_ex2(s[n][3] - b1);
          l0 += s[n][0] + s[n][1], l1 += s[n][2] + s[n][3];
        }
      }
      unsigned pa[NT / 2][4];
      loom_attn_to_a<NT, F16>(pa, s);

      loom_attn_wait<1>();  // V of this tile (the next K may still land)
      __syncthreads();
      if (kind) loom_attn_mma_kn<NT / 2, DT, F16>(o, pa, sV + buf * KV_ELEMS, LD);
      if (kt + 1 < t1) loom_attn_load_rows<BN, D, THREADS>(sV + (buf ^ 1) * KV_ELEMS, v, a.v_s, k0 + BN, S);
      loom_attn_commit();
      buf ^= 1;
    }

    // Row sums were kept per thread (the quad's maxima agree): add them up.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    // A row without any visible key: out 0, LSE -inf (see the top of the file).
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
    for (int d = 0; d < DT; ++d) o[d][0] *= inv0, o[d][1] *= inv0, o[d][2] *= inv1, o[d][3] *= inv1;
    if (t == 0) {
      const long long r = row0 + lane / 4;
      float* lse = a.lse + bh * L;
      if (r < L) lse[r] = l0 > 0.f ? (m0 + __log2f(l0)) * 0.6931471805599453f : loom_attn_neg_inf();
      if (r + 8 < L) lse[r + 8] = l1 > 0.f ? (m1 + __log2f(l1)) * 0.6931471805599453f : loom_attn_neg_inf();
    }
    // The warp's q rows are free once every copy into them has landed.
    loom_attn_wait<0>();
    __syncthreads();
    if (a.o32) {
      loom_attn_store_rows_f32<D>(o, 1.f, a.o32 + b * a.o_b + h * a.o_h, a.o_s, row0, L);
    } else {
      unsigned short* out = a.o + b * a.o_b + h * a.o_h;
      loom_attn_store_rows<D, F16>(o, 1.f, sQ + warp * 16 * LD, out, a.o_s, row0, L);
    }
  }
};

// ---------------------------------------------------------------------------
// Backward, with p = 2^(s * scale * log2 e - lse2) recomputed from the
// forward's LSE (so P is never stored either):
//   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP - Delta),
//   dK = scale dSᵀ Q,  dQ = scale dS K,  Delta[i] = sum_d dO[i,d] out[i,d].

// Delta = rowsum(dout * out) in float32 (out as the forward stored it, in
// bf16, as PyTorch does); with dq_acc, also zero the atomic dQ workspace.
// One thread per 8-element chunk, D / 8 threads per row.
template <int D>
__device__ __forceinline__ void loom_attn_bwd_pre(const LoomAttnArgs& a, long long rows_total) {
  enum { CPR = D / 8 };
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long row = e / CPR;
  const int part = (int)(e % CPR);
  float sum = 0.f;
  if (row < rows_total) {
    const long long bh = row / a.L, i = row - bh * a.L, b = bh / a.H, h = bh - b * a.H;
    const uint4 o = *reinterpret_cast<const uint4*>(a.o + b * a.o_b + h * a.o_h + i * a.o_s + part * 8);
    const uint4 d = *reinterpret_cast<const uint4*>(a.dout + b * a.do_b + h * a.do_h + i * a.do_s + part * 8);
    const unsigned ow[4] = {o.x, o.y, o.z, o.w}, dw[4] = {d.x, d.y, d.z, d.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      sum += loom_bf16_widen((unsigned short)(ow[w] & 0xffffu)) * loom_bf16_widen((unsigned short)(dw[w] & 0xffffu));
      sum += loom_bf16_widen((unsigned short)(ow[w] >> 16)) * loom_bf16_widen((unsigned short)(dw[w] >> 16));
    }
    if (a.dq_acc) {
      float4* z = reinterpret_cast<float4*>(a.dq_acc + row * D + part * 8);
      z[0] = make_float4(0.f, 0.f, 0.f, 0.f);
      z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
#pragma unroll
  for (int s = 1; s < CPR; s *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, s);
  if (row < rows_total && part == 0) a.delta[row] = sum;
}

// Atomic scheme only: dq = bf16(dq_acc), which already holds scale * dS K.
template <int D>
__device__ __forceinline__ void loom_attn_dq_convert(const LoomAttnArgs& a, long long rows_total) {
  enum { CPR = D / 8 };
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long row = e / CPR;
  const int part = (int)(e % CPR);
  if (row >= rows_total) return;
  const long long bh = row / a.L, i = row - bh * a.L, b = bh / a.H, h = bh - b * a.H;
  const float4* s = reinterpret_cast<const float4*>(a.dq_acc + row * D + part * 8);
  const float4 x = s[0], y = s[1];
  *reinterpret_cast<uint4*>(a.dq + b * a.dq_b + h * a.dq_h + i * a.dq_s + part * 8) =
      make_uint4(loom_attn_pack<false>(x.x, x.y), loom_attn_pack<false>(x.z, x.w), loom_attn_pack<false>(y.x, y.y),
                 loom_attn_pack<false>(y.z, y.w));
}

// dK and dV for one key tile (BN = 16 * WARPS keys; each warp 16 keys with
// its k and v rows as A fragments in registers and its dK, dV rows as
// accumulators), walking the query tiles (BM = BN rows) that see it. Per
// query tile (q, dO, LSE, Delta double-buffered, prefetched one tile ahead)
// the warp computes transposed tiles, keys as rows, so that Pᵀ and dSᵀ are
// A operands straight from the accumulators:
//   Sᵀ = K Qᵀ -> Pᵀ;  dV += Pᵀ dO;  dPᵀ = V dOᵀ -> dSᵀ;  dK += dSᵀ Q.
// DQ_ATOMIC: also dQ += scale dS K through shared memory (dSᵀ, all warps'
// keys) and red.global.add.v2.f32 into a.dq_acc.
template <int D, class Mask, bool DQ_ATOMIC = false, int WARPS = 4, bool F16 = false>
struct LoomAttnBwdKV {
  enum {
    BN = 16 * WARPS,
    BM = 16 * WARPS,
    LD = D + 8,
    DS_LD = BM + 8,
    THREADS = 32 * WARPS,
    KS = D / 16,
    DT = D / 8,
    QT = BM / 8,  // n8 tiles of a transposed score tile (queries)
    KV_ELEMS = BN * LD,
    Q_ELEMS = BM * LD,
    SMEM_BYTES = 2 * (2 * KV_ELEMS + 4 * Q_ELEMS) + 4 * 4 * BM + (DQ_ATOMIC ? 2 * BN * DS_LD : 0),
    MIN_BLOCKS = 2,
    // k and v rows as register fragments up to D = 64; beyond, the dK and
    // dV accumulators alone take 2D registers, and the fragments are read
    // from shared memory per product instead of spilling.
    KV_REGS = D <= 64,
  };
  static_assert(D % 16 == 0 && D >= 32 && D <= 128, "LoomAttnBwdKV: D is 32, 48, ..., 128");

  static __device__ __forceinline__ void run(const LoomAttnArgs& a, const Mask& mask_all) {
    extern __shared__ __align__(16) unsigned char loom_attn_smem[];
    unsigned short* sK = reinterpret_cast<unsigned short*>(loom_attn_smem);
    unsigned short* sV = sK + KV_ELEMS;
    unsigned short* sQ = sV + KV_ELEMS;   // [2][BM][LD]
    unsigned short* sdO = sQ + 2 * Q_ELEMS;  // [2][BM][LD]
    float* sLse = reinterpret_cast<float*>(sdO + 2 * Q_ELEMS);  // [2][BM]
    float* sDelta = sLse + 2 * BM;                              // [2][BM]
    unsigned short* sdS = reinterpret_cast<unsigned short*>(sDelta + 2 * BM);  // [BN][DS_LD]
    const long long L = a.L, S = a.S;
    const long long bh = blockIdx.x, b = bh / a.H, h = bh - b * a.H;
    const long long k0 = (long long)blockIdx.y * BN, klast = (k0 + BN < S ? k0 + BN : S) - 1;
    const Mask mask = mask_all.for_head(b, h);
    const unsigned short* q = a.q + b * a.q_b + h * a.q_h;
    const unsigned short* dout = a.dout + b * a.do_b + h * a.do_h;
    const float* lse = a.lse + bh * L;
    const float* delta = a.delta + bh * L;
    const long long nqt = (L + BM - 1) / BM;
    auto kind_of = [&](long long qt) {
      const long long i0 = qt * BM, i1 = (i0 + BM < L ? i0 + BM : L) - 1;
      return loom_attn_tile_kind(mask, i0, i1, k0, klast);
    };
    // The query tiles that see this key tile. A scan, not a formula, so any
    // functor works; it costs a few integer operations per query tile.
    auto next_tile = [&](long long qt) {
      while (qt < nqt && kind_of(qt) == 0) ++qt;
      return qt;
    };
    auto load_q = [&](long long qt, int buf) {
      const long long i0 = qt * BM;
      loom_attn_load_rows<BM, D, THREADS>(sQ + buf * Q_ELEMS, q, a.q_s, i0, L);
      loom_attn_load_rows<BM, D, THREADS>(sdO + buf * Q_ELEMS, dout, a.do_s, i0, L);
      for (int e = threadIdx.x; e < 2 * BM; e += THREADS) {
        const int r = e % BM;
        const bool ok = i0 + r < L;
        const float* src = e < BM ? lse : delta;
        loom_attn_cp4((e < BM ? sLse : sDelta) + buf * BM + r, ok ? src + i0 + r : src, ok ? 4 : 0);
      }
    };

    long long qt = next_tile(0);
    loom_attn_load_rows<BN, D, THREADS>(sK, a.k + b * a.k_b + h * a.k_h, a.k_s, k0, S);
    loom_attn_load_rows<BN, D, THREADS>(sV, a.v + b * a.v_b + h * a.v_h, a.v_s, k0, S);
    if (qt < nqt) load_q(qt, 0);
    loom_attn_commit();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const float c = a.scale * 1.4426950408889634f;
    unsigned ka[KV_REGS ? KS : 1][4], va[KV_REGS ? KS : 1][4];
    float dk[DT][4], dv[DT][4];
    loom_attn_zero(dk);
    loom_attn_zero(dv);
    bool first = true;
    int buf = 0;
    while (qt < nqt) {
      const long long i0 = qt * BM, nxt = next_tile(qt + 1);
      loom_attn_wait<0>();
      __syncthreads();
      if constexpr (KV_REGS) {
        if (first) {
          loom_attn_load_a<KS>(ka, sK + warp * 16 * LD, LD);
          loom_attn_load_a<KS>(va, sV + warp * 16 * LD, LD);
          first = false;
        }
      }
      // The other buffers were last read by the previous tile, before the barrier.
      if (nxt < nqt) load_q(nxt, buf ^ 1);
      loom_attn_commit();
      const unsigned short* cQ = sQ + buf * Q_ELEMS;
      const unsigned short* cdO = sdO + buf * Q_ELEMS;
      const float* cL = sLse + buf * BM;
      const float* cD = sDelta + buf * BM;

      // A warp whose keys this query tile cannot see adds nothing (its dSᵀ
      // rows are zero for the atomic dQ product).
      const int kind = loom_attn_warp_kind<true, QT>(mask, k0 + warp * 16, i0, S, L);
      unsigned da[QT / 2][4];
      if (kind) {
        float s[QT][4];  // Sᵀ, then Pᵀ
        loom_attn_zero(s);
        if constexpr (KV_REGS) loom_attn_mma_nk<KS, QT, F16>(s, ka, cQ, LD);
        else loom_attn_mma_nk_sa<KS, QT, F16>(s, sK + warp * 16 * LD, LD, cQ, LD);
#pragma unroll
        for (int n = 0; n < QT; ++n) {
          const float2 l2 = *reinterpret_cast<const float2*>(cL + n * 8 + 2 * t);
          const float x = loom_attn_lse2(l2.x), y = loom_attn_lse2(l2.y);
          s[n][0] = __fmaf_rn(s[n][0], c, -x), s[n][1] = __fmaf_rn(s[n][1], c, -y);
          s[n][2] = __fmaf_rn(s[n][2], c, -x), s[n][3] = __fmaf_rn(s[n][3], c, -y);
        }
        if (kind == 1) loom_attn_apply_mask<true>(s, mask, k0 + warp * 16, i0, L, S);
#pragma unroll
        for (int n = 0; n < QT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[n][e] = loom_attn_ex2(s[n][e]);
        {
          unsigned pa[QT / 2][4];
          loom_attn_to_a<QT, F16>(pa, s);
          loom_attn_mma_kn<QT / 2, DT, F16>(dv, pa, cdO, LD);
        }
        float dp[QT][4];  // dPᵀ, then dSᵀ
        loom_attn_zero(dp);
        if constexpr (KV_REGS) loom_attn_mma_nk<KS, QT, F16>(dp, va, cdO, LD);
        else loom_attn_mma_nk_sa<KS, QT, F16>(dp, sV + warp * 16 * LD, LD, cdO, LD);
#pragma unroll
        for (int n = 0; n < QT; ++n) {
          const float2 dl = *reinterpret_cast<const float2*>(cD + n * 8 + 2 * t);
          dp[n][0] = s[n][0] * (dp[n][0] - dl.x), dp[n][1] = s[n][1] * (dp[n][1] - dl.y);
          dp[n][2] = s[n][2] * (dp[n][2] - dl.x), dp[n][3] = s[n][3] * (dp[n][3] - dl.y);
        }
        loom_attn_to_a<QT, F16>(da, dp);
        loom_attn_mma_kn<QT / 2, DT, F16>(dk, da, cQ, LD);
      } else {
#pragma unroll
        for (int kk = 0; kk < QT / 2; ++kk) da[kk][0] = da[kk][1] = da[kk][2] = da[kk][3] = 0u;
      }

      if constexpr (DQ_ATOMIC) {
        // dSᵀ of every warp (its keys x all queries) to shared memory; each
        // warp then owns 16 queries of dQ += dS K over all BN keys.
        unsigned short* w = sdS + (warp * 16 + g) * DS_LD + 2 * t;
#pragma unroll
        for (int kk = 0; kk < QT / 2; ++kk) {
          *reinterpret_cast<unsigned*>(w + kk * 16) = da[kk][0];
          *reinterpret_cast<unsigned*>(w + 8 * DS_LD + kk * 16) = da[kk][1];
          *reinterpret_cast<unsigned*>(w + kk * 16 + 8) = da[kk][2];
          *reinterpret_cast<unsigned*>(w + 8 * DS_LD + kk * 16 + 8) = da[kk][3];
        }
        __syncthreads();
        unsigned sa[BN / 16][4];
        loom_attn_load_a_t<BN / 16>(sa, sdS + warp * 16, DS_LD);
        float dq[DT][4];
        loom_attn_zero(dq);
        loom_attn_mma_kn<BN / 16, DT, F16>(dq, sa, sK, LD);
        const long long r = i0 + warp * 16 + g;
        float* acc = a.dq_acc + (bh * L + r) * D + 2 * t;
#pragma unroll
        for (int d = 0; d < DT; ++d) {
          if (r < L)
            asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(acc + d * 8), "f"(dq[d][0] * a.scale),
                         "f"(dq[d][1] * a.scale)
                         : "memory");
          if (r + 8 < L)
            asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(acc + 8 * D + d * 8), "f"(dq[d][2] * a.scale),
                         "f"(dq[d][3] * a.scale)
                         : "memory");
        }
      }
      qt = nxt;
      buf ^= 1;
    }

    // Every warp is past its last read of sK / sV (and no copy is in flight)
    // before the warps stage their rows there.
    loom_attn_wait<0>();
    __syncthreads();
    const long long r0 = k0 + warp * 16;
    if (a.dk32) {
      loom_attn_store_rows_f32<D>(dk, a.scale, a.dk32 + b * a.dk_b + h * a.dk_h, a.dk_s, r0, S);
      loom_attn_store_rows_f32<D>(dv, 1.f, a.dv32 + b * a.dv_b + h * a.dv_h, a.dv_s, r0, S);
    } else {
      loom_attn_store_rows<D, F16>(dk, a.scale, sK + warp * 16 * LD, a.dk + b * a.dk_b + h * a.dk_h, a.dk_s, r0, S);
      loom_attn_store_rows<D, F16>(dv, 1.f, sV + warp * 16 * LD, a.dv + b * a.dv_b + h * a.dv_h, a.dv_s, r0, S);
    }
  }
};

// dQ for one query tile (BM = 16 * WARPS rows; each warp 16 rows with q and
// dO as A fragments in registers), walking the visible key tiles (BN = 64,
// K and V double-buffered and prefetched one tile ahead):
//   S = Q Kᵀ -> P;  dP = dO Vᵀ -> dS;  dQ += dS K.
template <int D, class Mask, int WARPS = 4, bool F16 = false>
struct LoomAttnBwdQ {
  enum {
    BM = 16 * WARPS,
    BN = 64,
    LD = D + 8,
    THREADS = 32 * WARPS,
    KS = D / 16,
    DT = D / 8,
    NT = BN / 8,
    Q_ELEMS = BM * LD,
    KV_ELEMS = BN * LD,
    SMEM_BYTES = 2 * (2 * Q_ELEMS + 4 * KV_ELEMS),
    MIN_BLOCKS = 2,
  };
  static_assert(D % 16 == 0 && D >= 32 && D <= 128, "LoomAttnBwdQ: D is 32, 48, ..., 128");

  static __device__ __forceinline__ void run(const LoomAttnArgs& a, const Mask& mask_all) {
    extern __shared__ __align__(16) unsigned char loom_attn_smem[];
    unsigned short* sQ = reinterpret_cast<unsigned short*>(loom_attn_smem);
    unsigned short* sdO = sQ + Q_ELEMS;
    unsigned short* sK = sdO + Q_ELEMS;  // [2][BN][LD]
    unsigned short* sV = sK + 2 * KV_ELEMS;
    const long long L = a.L, S = a.S;
    const long long bh = blockIdx.x, b = bh / a.H, h = bh - b * a.H;
    const long long q0 = loom_attn_query_block<BM>(L), qlast = (q0 + BM < L ? q0 + BM : L) - 1;
    const Mask mask = mask_all.for_head(b, h);
    const unsigned short* k = a.k + b * a.k_b + h * a.k_h;
    const unsigned short* v = a.v + b * a.v_b + h * a.v_h;
    long long t0, t1;
    loom_attn_key_tiles<BN>(mask, q0, qlast, S, t0, t1);

    loom_attn_load_rows<BM, D, THREADS>(sQ, a.q + b * a.q_b + h * a.q_h, a.q_s, q0, L);
    loom_attn_load_rows<BM, D, THREADS>(sdO, a.dout + b * a.do_b + h * a.do_h, a.do_s, q0, L);
    if (t0 < t1) {
      loom_attn_load_rows<BN, D, THREADS>(sK, k, a.k_s, t0 * BN, S);
      loom_attn_load_rows<BN, D, THREADS>(sV, v, a.v_s, t0 * BN, S);
    }
    loom_attn_commit();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const long long row0 = q0 + warp * 16;
    const float c = a.scale * 1.4426950408889634f;
    // The thread's two rows: lse2 (+inf for rows past L or without keys,
    // so their p is 0) and Delta.
    const long long r0 = row0 + g, r1 = r0 + 8;
    const float* lse = a.lse + bh * L;
    const float* delta = a.delta + bh * L;
    const float lz0 = r0 < L ? loom_attn_lse2(lse[r0]) : loom_attn_pos_inf();
    const float lz1 = r1 < L ? loom_attn_lse2(lse[r1]) : loom_attn_pos_inf();
    const float dl0 = r0 < L ? delta[r0] : 0.f, dl1 = r1 < L ? delta[r1] : 0.f;

    unsigned qa[KS][4], doa[KS][4];
    float dq[DT][4];
    loom_attn_zero(dq);
    int buf = 0;
    for (long long kt = t0; kt < t1; ++kt) {
      const long long k0 = kt * BN;
      loom_attn_wait<0>();
      __syncthreads();
      if (kt == t0) {
        loom_attn_load_a<KS>(qa, sQ + warp * 16 * LD, LD);
        loom_attn_load_a<KS>(doa, sdO + warp * 16 * LD, LD);
      }
      if (kt + 1 < t1) {
        loom_attn_load_rows<BN, D, THREADS>(sK + (buf ^ 1) * KV_ELEMS, k, a.k_s, k0 + BN, S);
        loom_attn_load_rows<BN, D, THREADS>(sV + (buf ^ 1) * KV_ELEMS, v, a.v_s, k0 + BN, S);
      }
      loom_attn_commit();
      const unsigned short* cK = sK + buf * KV_ELEMS;
      const unsigned short* cV = sV + buf * KV_ELEMS;

      const int kind = loom_attn_warp_kind<false, NT>(mask, row0, k0, L, S);
      if (kind) {
        float s[NT][4];  // S, then P
        loom_attn_zero(s);
        loom_attn_mma_nk<KS, NT, F16>(s, qa, cK, LD);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          s[n][0] = __fmaf_rn(s[n][0], c, -lz0), s[n][1] = __fmaf_rn(s[n][1], c, -lz0);
          s[n][2] = __fmaf_rn(s[n][2], c, -lz1), s[n][3] = __fmaf_rn(s[n][3], c, -lz1);
        }
        if (kind == 1) loom_attn_apply_mask<false>(s, mask, row0, k0, L, S);
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[n][e] = loom_attn_ex2(s[n][e]);
        float dp[NT][4];  // dP, then dS
        loom_attn_zero(dp);
        loom_attn_mma_nk<KS, NT, F16>(dp, doa, cV, LD);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          dp[n][0] = s[n][0] * (dp[n][0] - dl0), dp[n][1] = s[n][1] * (dp[n][1] - dl0);
          dp[n][2] = s[n][2] * (dp[n][2] - dl1), dp[n][3] = s[n][3] * (dp[n][3] - dl1);
        }
        unsigned da[NT / 2][4];
        loom_attn_to_a<NT, F16>(da, dp);
        loom_attn_mma_kn<NT / 2, DT, F16>(dq, da, cK, LD);
      }
      buf ^= 1;
    }

    loom_attn_wait<0>();
    __syncthreads();
    if (a.dq32) loom_attn_store_rows_f32<D>(dq, a.scale, a.dq32 + b * a.dq_b + h * a.dq_h, a.dq_s, row0, L);
    else loom_attn_store_rows<D, F16>(dq, a.scale, sQ + warp * 16 * LD, a.dq + b * a.dq_b + h * a.dq_h, a.dq_s, row0, L);
  }
};

// ---------------------------------------------------------------------------
// Generic kernels over the templates (grid and shared memory as for the
// entry points below, from each struct's BM / BN, THREADS and SMEM_BYTES).

template <int D, class Mask, int WARPS = 8>
__global__ void __launch_bounds__(LoomAttnFwd<D, Mask, WARPS>::THREADS, LoomAttnFwd<D, Mask, WARPS>::MIN_BLOCKS)
    loom_attention_fwd_kernel(LoomAttnArgs a, Mask m) {
  LoomAttnFwd<D, Mask, WARPS>::run(a, m);
}
template <int D>
__global__ void __launch_bounds__(256) loom_attention_bwd_pre_kernel(LoomAttnArgs a, long long rows_total) {
  loom_attn_bwd_pre<D>(a, rows_total);
}
template <int D, class Mask, bool DQ_ATOMIC>
__global__ void __launch_bounds__(LoomAttnBwdKV<D, Mask, DQ_ATOMIC>::THREADS, LoomAttnBwdKV<D, Mask, DQ_ATOMIC>::MIN_BLOCKS)
    loom_attention_bwd_dkdv_kernel(LoomAttnArgs a, Mask m) {
  LoomAttnBwdKV<D, Mask, DQ_ATOMIC>::run(a, m);
}
template <int D, class Mask>
__global__ void __launch_bounds__(LoomAttnBwdQ<D, Mask>::THREADS, LoomAttnBwdQ<D, Mask>::MIN_BLOCKS)
    loom_attention_bwd_dq_kernel(LoomAttnArgs a, Mask m) {
  LoomAttnBwdQ<D, Mask>::run(a, m);
}
template <int D>
__global__ void __launch_bounds__(256) loom_attention_dq_convert_kernel(LoomAttnArgs a, long long rows_total) {
  loom_attn_dq_convert<D>(a, rows_total);
}

// ---------------------------------------------------------------------------
// extern "C" entry points, bf16, D = 64 (arguments: top of the file), for
// programs that launch the kernels themselves (bench/micro/flash_attention.cu
// defines LOOM_ATTENTION_PLAIN_ENTRIES). loom's own entry points read a
// library call's meta instead: kernels/cuda/attention_library.cu.
#ifdef LOOM_ATTENTION_PLAIN_ENTRIES

#define LOOM_ATTN_FWD_PARAMS                                                                                         \
  const unsigned short *q, const unsigned short *k, const unsigned short *v, unsigned short *out, float *lse,       \
      long long q_b, long long q_h, long long q_s, long long k_b, long long k_h, long long k_s, long long v_b,      \
      long long v_h, long long v_s, long long o_b, long long o_h, long long o_s, long long L, long long S, int H,   \
      float scale, long long window
#define LOOM_ATTN_FWD_ARGS                                                                                  \
  LoomAttnArgs a = {};                                                                                      \
  a.q = q, a.k = k, a.v = v, a.o = out, a.lse = lse;                                                        \
  a.q_b = q_b, a.q_h = q_h, a.q_s = q_s, a.k_b = k_b, a.k_h = k_h, a.k_s = k_s, a.v_b = v_b, a.v_h = v_h;   \
  a.v_s = v_s, a.o_b = o_b, a.o_h = o_h, a.o_s = o_s, a.L = L, a.S = S, a.H = H, a.scale = scale;
#define LOOM_ATTN_BWD_PARAMS                                                                                       \
  const unsigned short *q, const unsigned short *k, const unsigned short *v, const unsigned short *dout,           \
      float *lse, float *delta, unsigned short *dq, unsigned short *dk, unsigned short *dv, long long q_b,         \
      long long q_h, long long q_s, long long k_b, long long k_h, long long k_s, long long v_b, long long v_h,     \
      long long v_s, long long do_b, long long do_h, long long do_s, long long dq_b, long long dq_h,               \
      long long dq_s, long long dk_b, long long dk_h, long long dk_s, long long dv_b, long long dv_h,              \
      long long dv_s, long long L, long long S, int H, float scale, long long window
#define LOOM_ATTN_BWD_ARGS                                                                                   \
  LoomAttnArgs a = {};                                                                                       \
  a.q = q, a.k = k, a.v = v, a.dout = dout, a.lse = lse, a.delta = delta, a.dq = dq, a.dk = dk, a.dv = dv;   \
  a.q_b = q_b, a.q_h = q_h, a.q_s = q_s, a.k_b = k_b, a.k_h = k_h, a.k_s = k_s, a.v_b = v_b, a.v_h = v_h;    \
  a.v_s = v_s, a.do_b = do_b, a.do_h = do_h, a.do_s = do_s, a.dq_b = dq_b, a.dq_h = dq_h, a.dq_s = dq_s;     \
  a.dk_b = dk_b, a.dk_h = dk_h, a.dk_s = dk_s, a.dv_b = dv_b, a.dv_h = dv_h, a.dv_s = dv_s;                  \
  a.L = L, a.S = S, a.H = H, a.scale = scale;

#define LOOM_ATTN_ENTRIES(NAME, MASK, MAKE)                                                                     \
  extern "C" __global__ void __launch_bounds__(LoomAttnFwd<64, MASK>::THREADS, LoomAttnFwd<64, MASK>::MIN_BLOCKS) \
      loom_attention_fwd_d64_##NAME(LOOM_ATTN_FWD_PARAMS) {                                                      \
    LOOM_ATTN_FWD_ARGS                                                                                          \
    LoomAttnFwd<64, MASK>::run(a, MAKE);                                                                        \
  }                                                                                                             \
  extern "C" __global__ void __launch_bounds__(LoomAttnBwdKV<64, MASK>::THREADS,                                \
                                               LoomAttnBwdKV<64, MASK>::MIN_BLOCKS)                             \
      loom_attention_bwd_dkdv_d64_##NAME(LOOM_ATTN_BWD_PARAMS) {                                                 \
    LOOM_ATTN_BWD_ARGS                                                                                          \
    LoomAttnBwdKV<64, MASK>::run(a, MAKE);                                                                      \
  }                                                                                                             \
  extern "C" __global__ void __launch_bounds__(LoomAttnBwdQ<64, MASK>::THREADS, LoomAttnBwdQ<64, MASK>::MIN_BLOCKS) \
      loom_attention_bwd_dq_d64_##NAME(LOOM_ATTN_BWD_PARAMS) {                                                   \
    LOOM_ATTN_BWD_ARGS                                                                                          \
    LoomAttnBwdQ<64, MASK>::run(a, MAKE);                                                                       \
  }

LOOM_ATTN_ENTRIES(none, LoomAttnNoMask, LoomAttnNoMask{})
LOOM_ATTN_ENTRIES(causal, LoomAttnCausal, LoomAttnCausal{})
LOOM_ATTN_ENTRIES(window, LoomAttnWindow, LoomAttnWindow{window})

extern "C" __global__ void __launch_bounds__(256)
    loom_attention_bwd_pre_d64(const unsigned short* out, const unsigned short* dout, float* delta, long long o_b,
                               long long o_h, long long o_s, long long do_b, long long do_h, long long do_s,
                               long long L, int H, long long bh_total) {
  LoomAttnArgs a = {};
  a.o = const_cast<unsigned short*>(out), a.dout = dout, a.delta = delta;
  a.o_b = o_b, a.o_h = o_h, a.o_s = o_s, a.do_b = do_b, a.do_h = do_h, a.do_s = do_s, a.L = L, a.H = H;
  loom_attn_bwd_pre<64>(a, bh_total * L);
}

#undef LOOM_ATTN_ENTRIES
#undef LOOM_ATTN_FWD_PARAMS
#undef LOOM_ATTN_FWD_ARGS
#undef LOOM_ATTN_BWD_PARAMS
#undef LOOM_ATTN_BWD_ARGS
#endif  // LOOM_ATTENTION_PLAIN_ENTRIES
