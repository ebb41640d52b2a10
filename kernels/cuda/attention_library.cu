// loom's entry points to the attention kernels (kernels/cuda/attention.cu):
// Attention, AttentionGradQ and AttentionGradKV as library calls, with the
// library's parameters (LOOM_ATTENTION_PARAMS: bufs, fs, is, err, meta)
// and their meta laid out as meta_layout.h's `attention` says. The build
// embeds bfloat16.cuh, meta_layout.h, attention.cu and this file as one
// NVRTC source (kAttentionSource), compiled on a GPU the first time an
// attention op runs there, apart from the other library kernels so that
// programs without attention never pay for its compile.
//
// A call's tensors are whole buffers: q, k, v and dout [N, rows, D] bf16 (f16),
// N = batch * heads taken as the kernels' B with H = 1; the outputs are
// float32 (kernels' o32 / dq32 / dk32 / dv32): Attention's value is out
// [N, L, D] then the logsumexps [N, L] (the kernels' lse); AttentionGradKV's
// rows are [dk | dv], 2D floats a row. delta (rowsum(dout * out)) comes
// computed by the caller, so the kernels' own preprocess is not used. A
// mask tensor, where the call has one, is its last input: bool [P, R, S].

#define LOOM_ATTENTION_PARAMS \
  void *const *bufs, const double *fs, const long long *is, long long *err, const long long *meta

namespace loom_attention_library {

namespace ml = loom::kernels::cuda::meta_layout::attention;

template <class T>
__device__ __forceinline__ T* buffer(void* const* bufs, const long long* is, long long id, long long offset) {
  return (T*)bufs[id] + loom::kernels::cuda::meta_layout::element_offset(offset, is);
}

// The arguments every kernel reads: q, k, v, the sizes and the scale.
template <int D>
__device__ __forceinline__ LoomAttnArgs common(void* const* bufs, const double* fs, const long long* is,
                                               const long long* meta) {
  LoomAttnArgs a = {};
  const long long L = meta[ml::kL], S = meta[ml::kS];
  a.q = buffer<const unsigned short>(bufs, is, meta[ml::kQ], meta[ml::kQOffset]);
  a.k = buffer<const unsigned short>(bufs, is, meta[ml::kK], meta[ml::kKOffset]);
  a.v = buffer<const unsigned short>(bufs, is, meta[ml::kV], meta[ml::kVOffset]);
  a.q_b = L * D, a.q_h = 0, a.q_s = D;
  a.k_b = S * D, a.k_h = 0, a.k_s = D;
  a.v_b = S * D, a.v_h = 0, a.v_s = D;
  a.L = L, a.S = S, a.H = 1;
  a.scale = (float)fs[meta[ml::kScalarBegin]];
  return a;
}

template <int D>
__device__ __forceinline__ LoomAttnArgs backward(void* const* bufs, const double* fs, const long long* is,
                                                 const long long* meta) {
  LoomAttnArgs a = common<D>(bufs, fs, is, meta);
  a.dout = buffer<const unsigned short>(bufs, is, meta[ml::kDout], meta[ml::kDoutOffset]);
  a.do_b = a.L * D, a.do_h = 0, a.do_s = D;
  a.lse = buffer<float>(bufs, is, meta[ml::kLse], meta[ml::kLseOffset]);
  a.delta = buffer<float>(bufs, is, meta[ml::kDelta], meta[ml::kDeltaOffset]);
  return a;
}

// The call's mask: the window of a sliding one is its int64 runtime scalar 1;
// a mask tensor is the buffer at meta kMask (ir::AttentionMaskPlanes).
template <class Mask>
__device__ __forceinline__ Mask mask_of(void* const*, const long long*, const long long*) {
  return Mask{};
}
template <>
__device__ __forceinline__ LoomAttnWindow mask_of<LoomAttnWindow>(void* const*, const long long* is, const long long* meta) {
  return LoomAttnWindow{is[meta[ml::kScalarBegin] + 1]};
}
template <>
__device__ __forceinline__ LoomAttnPlanes<LoomAttnNoMask> mask_of<LoomAttnPlanes<LoomAttnNoMask>>(
    void* const* bufs, const long long* is, const long long* meta) {
  return {LoomAttnNoMask{}, buffer<const unsigned char>(bufs, is, meta[ml::kMask], meta[ml::kMaskOffset]),
          meta[ml::kMaskPlanes], meta[ml::kMaskRows], meta[ml::kS], meta[ml::kMaskDivisor]};
}

template <int D, class Mask, bool F16>
__device__ __forceinline__ void fwd(void* const* bufs, const double* fs, const long long* is, const long long* meta) {
  using Kernel = LoomAttnFwd<D, Mask, 8, F16>;
  static_assert(Kernel::BM == ml::kFwdRows && Kernel::THREADS == ml::kFwdThreads &&
                    Kernel::SMEM_BYTES == ml::fwd_shared_bytes(D),
                "meta_layout.h's attention tiles differ from LoomAttnFwd's");
  LoomAttnArgs a = common<D>(bufs, fs, is, meta);
  float* value = buffer<float>(bufs, is, meta[ml::kOut], 0);
  a.o32 = value, a.o_b = a.L * D, a.o_h = 0, a.o_s = D;
  a.lse = value + meta[ml::kN] * a.L * D;
  Kernel::run(a, mask_of<Mask>(bufs, is, meta));
}

template <int D, class Mask, bool F16>
__device__ __forceinline__ void grad_q(void* const* bufs, const double* fs, const long long* is, const long long* meta) {
  using Kernel = LoomAttnBwdQ<D, Mask, 4, F16>;
  static_assert(Kernel::BM == ml::kBwdRows && Kernel::THREADS == ml::kBwdThreads &&
                    Kernel::SMEM_BYTES == ml::grad_q_shared_bytes(D),
                "meta_layout.h's attention tiles differ from LoomAttnBwdQ's");
  LoomAttnArgs a = backward<D>(bufs, fs, is, meta);
  a.dq32 = buffer<float>(bufs, is, meta[ml::kOut], 0);
  a.dq_b = a.L * D, a.dq_h = 0, a.dq_s = D;
  Kernel::run(a, mask_of<Mask>(bufs, is, meta));
}

template <int D, class Mask, bool F16>
__device__ __forceinline__ void grad_kv(void* const* bufs, const double* fs, const long long* is, const long long* meta) {
  using Kernel = LoomAttnBwdKV<D, Mask, false, 4, F16>;
  static_assert(Kernel::BN == ml::kBwdRows && Kernel::THREADS == ml::kBwdThreads &&
                    Kernel::SMEM_BYTES == ml::grad_kv_shared_bytes(D),
                "meta_layout.h's attention tiles differ from LoomAttnBwdKV's");
  LoomAttnArgs a = backward<D>(bufs, fs, is, meta);
  float* dkv = buffer<float>(bufs, is, meta[ml::kOut], 0);
  a.dk32 = dkv, a.dv32 = dkv + D;
  a.dk_b = a.dv_b = a.S * 2 * D, a.dk_h = a.dv_h = 0, a.dk_s = a.dv_s = 2 * D;
  Kernel::run(a, mask_of<Mask>(bufs, is, meta));
}

}  // namespace loom_attention_library

// loom_attention_{fwd,grad_q,grad_kv}_<dtype>_d<D>_<mask>, mask none, causal,
// window or tensor (a mask tensor and no code). Each kernel is a module of
// its own: kernels/cuda/library.cpp attention_function_source() defines
// LOOM_ATTENTION_ENTRY as one of the entries below (and LOOM_ATTENTION_F16
// for a float16 one), so a program compiles only the kernels it launches
// (all 36 bfloat16 ones in one module took NVRTC 17.7 s on the H200
// machine's host). Without it, every entry of the dtype.
#define LOOM_ATTENTION_LIBRARY_FWD_(D, NAME, MASK, DT, F16)                                                         \
  extern "C" __global__ void __launch_bounds__(LoomAttnFwd<D, MASK, 8, F16>::THREADS,                              \
                                               LoomAttnFwd<D, MASK, 8, F16>::MIN_BLOCKS)                           \
      loom_attention_fwd_##DT##_d##D##_##NAME(LOOM_ATTENTION_PARAMS) {                                             \
    loom_attention_library::fwd<D, MASK, F16>(bufs, fs, is, meta);                                                 \
  }
#define LOOM_ATTENTION_LIBRARY_GRAD_Q_(D, NAME, MASK, DT, F16)                                                      \
  extern "C" __global__ void __launch_bounds__(LoomAttnBwdQ<D, MASK, 4, F16>::THREADS,                             \
                                               LoomAttnBwdQ<D, MASK, 4, F16>::MIN_BLOCKS)                          \
      loom_attention_grad_q_##DT##_d##D##_##NAME(LOOM_ATTENTION_PARAMS) {                                          \
    loom_attention_library::grad_q<D, MASK, F16>(bufs, fs, is, meta);                                              \
  }
#define LOOM_ATTENTION_LIBRARY_GRAD_KV_(D, NAME, MASK, DT, F16)                                                     \
  extern "C" __global__ void __launch_bounds__(LoomAttnBwdKV<D, MASK, false, 4, F16>::THREADS,                     \
                                               LoomAttnBwdKV<D, MASK, false, 4, F16>::MIN_BLOCKS)                  \
      loom_attention_grad_kv_##DT##_d##D##_##NAME(LOOM_ATTENTION_PARAMS) {                                         \
    loom_attention_library::grad_kv<D, MASK, F16>(bufs, fs, is, meta);                                             \
  }
// One more level, so that DT and F16 arrive expanded where they are pasted.
#define LOOM_ATTENTION_LIBRARY_FWD(D, NAME, MASK, DT, F16) LOOM_ATTENTION_LIBRARY_FWD_(D, NAME, MASK, DT, F16)
#define LOOM_ATTENTION_LIBRARY_GRAD_Q(D, NAME, MASK, DT, F16) LOOM_ATTENTION_LIBRARY_GRAD_Q_(D, NAME, MASK, DT, F16)
#define LOOM_ATTENTION_LIBRARY_GRAD_KV(D, NAME, MASK, DT, F16) LOOM_ATTENTION_LIBRARY_GRAD_KV_(D, NAME, MASK, DT, F16)
#ifdef LOOM_ATTENTION_F16
#define LOOM_ATTENTION_DT f16
#define LOOM_ATTENTION_IS_F16 true
#else
#define LOOM_ATTENTION_DT bf16
#define LOOM_ATTENTION_IS_F16 false
#endif
#ifdef LOOM_ATTENTION_ENTRY
LOOM_ATTENTION_ENTRY
#else
#define LOOM_ATTENTION_LIBRARY_ENTRIES(D, NAME, MASK)                                           \
  LOOM_ATTENTION_LIBRARY_FWD(D, NAME, MASK, LOOM_ATTENTION_DT, LOOM_ATTENTION_IS_F16)           \
  LOOM_ATTENTION_LIBRARY_GRAD_Q(D, NAME, MASK, LOOM_ATTENTION_DT, LOOM_ATTENTION_IS_F16)        \
  LOOM_ATTENTION_LIBRARY_GRAD_KV(D, NAME, MASK, LOOM_ATTENTION_DT, LOOM_ATTENTION_IS_F16)
#define LOOM_ATTENTION_LIBRARY_HEAD_DIM(D)                               \
  LOOM_ATTENTION_LIBRARY_ENTRIES(D, none, LoomAttnNoMask)                \
  LOOM_ATTENTION_LIBRARY_ENTRIES(D, causal, LoomAttnCausal)              \
  LOOM_ATTENTION_LIBRARY_ENTRIES(D, window, LoomAttnWindow)              \
  LOOM_ATTENTION_LIBRARY_ENTRIES(D, tensor, LoomAttnPlanes<LoomAttnNoMask>)
LOOM_ATTENTION_LIBRARY_HEAD_DIM(32)
LOOM_ATTENTION_LIBRARY_HEAD_DIM(64)
LOOM_ATTENTION_LIBRARY_HEAD_DIM(128)
#undef LOOM_ATTENTION_LIBRARY_HEAD_DIM
#undef LOOM_ATTENTION_LIBRARY_ENTRIES
#endif
