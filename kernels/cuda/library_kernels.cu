// The CUDA library kernels: the GPU counterpart of kernels/cpu/library.cpp
// and matmul.cpp, with the same semantics (the reference backend's).
//
// This file is never compiled by the host compiler. The build embeds it,
// after ir/philox.h and kernels/cuda/meta_layout.h, into library_source(),
// which NVRTC compiles at run time; hence no #include here. (The internal tests
// also compile it as host C++ against a small emulation of the CUDA
// built-ins, so it sticks to the few built-ins listed in
// tests/internal/cuda_emulation.h.)
//
// Every kernel has the parameters of LOOM_LIBRARY_PARAMS (library.h says
// what each is) and reads its shapes and buffer ids from `meta`, laid out as
// meta_layout.h says. Bool is stored as one byte holding 0 or 1 (unsigned char).
// Loops are grid-stride over 64-bit indices, so any grid is correct and the
// grid size is only a matter of speed.

#define LOOM_LIBRARY_PARAMS \
  void *const *bufs, const double *fs, const long long *is, long long *err, const long long *meta

namespace loom::kernels::cuda::device {

__device__ inline long long first_thread() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ inline long long thread_count() { return (long long)gridDim.x * blockDim.x; }

// Buffer `id` as T*, `offset` elements in.
template <class T>
__device__ inline T *buffer(void *const *bufs, const long long *is, long long id, long long offset) {
  return (T *)bufs[id] + meta_layout::element_offset(offset, is);
}

// The first failing node keeps its place in err[1]; the host then finds
// the bad index itself and builds the message.
__device__ inline void index_out_of_range(long long *err, long long node) {
  atomicCAS((unsigned long long *)&err[1], ~0ull, (unsigned long long)node);
  err[0] = meta_layout::kIndexOutOfRange;
}

// ------------------------------------------------------------------ moves
// Data movement copies elements as unsigned integers of their size: no
// dtype but the width matters.

template <class W>
__device__ void copy_2d(void *const *bufs, const long long *is, const long long *meta) {
  using namespace meta_layout::copy2d;
  W *dst = buffer<W>(bufs, is, meta[kDst], meta[kDstOffset]);
  const W *src = buffer<const W>(bufs, is, meta[kSrc], meta[kSrcOffset]);
  if (dst == src) return;  // an in-place update of the base: already there
  const long long rows = meta[kRows], cols = meta[kCols];
  const long long dst_stride = meta[kDstRowStride], src_stride = meta[kSrcRowStride];
  for (long long i = first_thread(); i < rows * cols; i += thread_count()) {
    const long long r = i / cols, c = i - r * cols;
    dst[r * dst_stride + c] = src[r * src_stride + c];
  }
}

template <class W>
__device__ void index_select(void *const *bufs, const long long *is, long long *err, const long long *meta) {
  using namespace meta_layout::index_select;
  W *out = buffer<W>(bufs, is, meta[kOut], 0);
  const W *x = buffer<const W>(bufs, is, meta[kX], meta[kXOffset]);
  const long long *index = buffer<const long long>(bufs, is, meta[kIndex], meta[kIndexOffset]);
  const long long size = meta[kDimSize], inner = meta[kInner], nidx = meta[kNumIndices];
  const long long n = meta[kOuter] * nidx * inner;
  for (long long i = first_thread(); i < n; i += thread_count()) {
    const long long q = i % inner, row = i / inner;
    const long long j = row % nidx, o = row / nidx;
    const long long k = index[j];
    if (k < 0 || k >= size) {
      index_out_of_range(err, meta[kNode]);
      continue;
    }
    out[i] = x[(o * size + k) * inner + q];
  }
}

// Only the index check of index_select / scatter_add, for an empty output
// (their kernels would visit nothing).
__device__ void check_index(void *const *bufs, const long long *is, long long *err, const long long *meta) {
  using namespace meta_layout::check_index;
  const long long *index = buffer<const long long>(bufs, is, meta[kIndex], meta[kIndexOffset]);
  for (long long i = first_thread(); i < meta[kNumIndices]; i += thread_count())
    if (index[i] < 0 || index[i] >= meta[kDimSize]) index_out_of_range(err, meta[kNode]);
}

// Element i of the index, at coordinates c of the index's shape, reads or
// updates x at c with c[dim] replaced by index[i], and src at c. False
// when index[i] is out of range. A 0-d index reads x[0] unchecked, as the
// reference does.
__device__ inline bool gather_offsets(const long long *meta, const long long *index, long long i, long long &x_off,
                                      long long &src_off) {
  using namespace meta_layout::gather_scatter;
  const long long dim = meta[kDim];
  long long rest = i;
  x_off = 0;
  src_off = 0;
  for (long long d = meta[kRank] - 1; d >= 0; --d) {
    const long long extent = meta[kIndexShape + d];
    const long long c = rest % extent;
    rest /= extent;
    long long x_c = c;
    if (d == dim) {
      x_c = index[i];
      if (x_c < 0 || x_c >= meta[kDimSize]) return false;
    }
    x_off += x_c * meta[kXStrides + d];
    src_off += c * meta[kSrcStrides + d];
  }
  return true;
}

template <class W>
__device__ void gather(void *const *bufs, const long long *is, long long *err, const long long *meta) {
  using namespace meta_layout::gather_scatter;
  W *out = buffer<W>(bufs, is, meta[kOut], 0);
  const W *x = buffer<const W>(bufs, is, meta[kX], meta[kXOffset]);
  const long long *index = buffer<const long long>(bufs, is, meta[kIndex], meta[kIndexOffset]);
  for (long long i = first_thread(); i < meta[kNumel]; i += thread_count()) {
    long long x_off, src_off;
    if (!gather_offsets(meta, index, i, x_off, src_off)) {
      index_out_of_range(err, meta[kNode]);
      continue;
    }
    out[i] = x[x_off];
  }
}

// bfloat16 in memory: its 16 bits (kernels/cuda/bfloat16.cuh). Converting
// to and from float rounds as loom::BFloat16 does, so the typed kernels
// below compute it in float and round each stored value, as the CPU does.
struct Bf16 {
  unsigned short bits;
  Bf16() = default;
  __device__ Bf16(float f) : bits(loom_bf16_narrow(f)) {}
  __device__ operator float() const { return loom_bf16_widen(bits); }
};
// float16 the same way (loom::Half's rounding).
struct F16 {
  unsigned short bits;
  F16() = default;
  __device__ F16(float f) : bits(loom_f16_narrow(f)) {}
  __device__ operator float() const { return loom_f16_widen(bits); }
};

// Integers add in their unsigned type (wrap-around, as on the CPU); bool is
// an or, and bfloat16 a compare-and-swap loop (each add rounded, as the
// CPU's `+=`), both on the aligned 32-bit word that holds the element (there
// are no byte or, here, 16-bit atomics). The word never leaves the
// allocation: allocations are at least 4-byte aligned and sized in whole
// pages.
__device__ inline void atomic_add(float *p, float v) { atomicAdd(p, v); }
__device__ inline void atomic_add(double *p, double v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int *p, int v) { atomicAdd((unsigned int *)p, (unsigned int)v); }
__device__ inline void atomic_add(long long *p, long long v) {
  atomicAdd((unsigned long long *)p, (unsigned long long)v);
}
template <class H>
__device__ inline void atomic_add_16(H *p, H v) {
  const unsigned long long address = (unsigned long long)p;
  unsigned int *word = (unsigned int *)(address & ~3ull);
  const unsigned shift = (unsigned)(address & 2) * 8;
  unsigned int seen = *word, expected;
  do {
    expected = seen;
    H old;
    old.bits = (unsigned short)(expected >> shift);
    const H sum(__fadd_rn((float)old, (float)v));
    const unsigned int next = (expected & ~(0xffffu << shift)) | (unsigned)sum.bits << shift;
    seen = atomicCAS(word, expected, next);
  } while (seen != expected);
}
__device__ inline void atomic_add(Bf16 *p, Bf16 v) { atomic_add_16(p, v); }
__device__ inline void atomic_add(F16 *p, F16 v) { atomic_add_16(p, v); }
__device__ inline void atomic_add(unsigned char *p, unsigned char v) {
  if (v == 0) return;
  const unsigned long long address = (unsigned long long)p;
  atomicOr((unsigned int *)(address & ~3ull), 1u << (8 * (address & 3)));
}

// out[...] += src[i]; out already holds x (a copy_2d launch before this one).
template <class T>
__device__ void scatter_add(void *const *bufs, const long long *is, long long *err, const long long *meta) {
  using namespace meta_layout::gather_scatter;
  T *out = buffer<T>(bufs, is, meta[kOut], 0);
  const T *src = buffer<const T>(bufs, is, meta[kSrc], meta[kSrcOffset]);
  const long long *index = buffer<const long long>(bufs, is, meta[kIndex], meta[kIndexOffset]);
  for (long long i = first_thread(); i < meta[kNumel]; i += thread_count()) {
    long long out_off, src_off;
    if (!gather_offsets(meta, index, i, out_off, src_off)) {
      index_out_of_range(err, meta[kNode]);
      continue;
    }
    atomic_add(out + out_off, src[src_off]);
  }
}

// ScatterReduce's fold (ir::ScatterKind: 0 assign, 1 multiply, 2 amax,
// 3 amin) of v into o, as the CPU's: integers multiply wrapping, bool
// (unsigned char 0/1) folds as logic, NaN propagates through amax/amin.
__device__ inline int mul_wrap(int a, int b) { return (int)((unsigned int)a * (unsigned int)b); }
__device__ inline long long mul_wrap(long long a, long long b) {
  return (long long)((unsigned long long)a * (unsigned long long)b);
}
template <class T>
__device__ inline T mul_wrap(T a, T b) { return T(a * b); }
template <class T>
__device__ inline T scatter_fold(long long kind, T o, T v) {
  if (kind == 0) return v;
  if (kind == 1) return mul_wrap(o, v);
  if (kind == 2) return (v != v || v > o) ? v : o;  // o NaN stays: v > NaN is false
  return (v != v || v < o) ? v : o;
}

// One thread per fiber along dim (the index elements that differ only in
// their dim coordinate: the only ones that can meet in one target), walked
// in increasing order: no atomics, and duplicates fold in the CPU's order,
// so assign's last write wins on every backend. out already holds x.
template <class T>
__device__ void scatter_reduce(void *const *bufs, const long long *is, long long *err, const long long *meta) {
  using namespace meta_layout::gather_scatter;
  T *out = buffer<T>(bufs, is, meta[kOut], 0);
  const T *src = buffer<const T>(bufs, is, meta[kSrc], meta[kSrcOffset]);
  const long long *index = buffer<const long long>(bufs, is, meta[kIndex], meta[kIndexOffset]);
  const long long rank = meta[kRank], dim = meta[kDim];
  const long long along = rank > 0 ? meta[kIndexShape + dim] : 1;
  long long inner = 1;
  for (long long d = dim + 1; d < rank; ++d) inner *= meta[kIndexShape + d];
  const long long fibers = along > 0 ? meta[kNumel] / along : 0;
  for (long long f = first_thread(); f < fibers; f += thread_count()) {
    const long long o = f / inner, q = f - o * inner;
    for (long long j = 0; j < along; ++j) {
      const long long i = (o * along + j) * inner + q;
      long long out_off, src_off;
      if (!gather_offsets(meta, index, i, out_off, src_off)) {
        index_out_of_range(err, meta[kNode]);
        continue;
      }
      out[out_off] = scatter_fold<T>(meta[kReduce], out[out_off], src[src_off]);
    }
  }
}

// out already holds the base (a copy_2d launch before this one). With one
// thread the loop visits the elements in row-major order, which is what
// makes the last write win when the view overlaps itself.
template <class W>
__device__ void scatter_strided(void *const *bufs, const long long *is, const long long *meta) {
  using namespace meta_layout::scatter_strided;
  W *out = buffer<W>(bufs, is, meta[kOut], 0);
  const W *value = buffer<const W>(bufs, is, meta[kValue], meta[kValueOffset]);
  for (long long i = first_thread(); i < meta[kNumel]; i += thread_count()) {
    long long off = meta_layout::element_offset(meta[kViewOffset], is), rest = i;
    for (long long d = meta[kRank] - 1; d >= 0; --d) {
      off += (rest % meta[kSizes + d]) * meta[kStrides + d];
      rest /= meta[kSizes + d];
    }
    out[off] = value[i];
  }
}

// ---------------------------------------------------------------- sorting
// Keys whose unsigned order is the values' order, as kernels/cpu's
// sort_key: NaN above +inf (all NaNs equal), -0.0 equal to 0.0. Sorting
// (key, position) pairs is then a stable sort of the values.
__device__ inline unsigned long long sort_key(unsigned char v) { return v != 0; }
__device__ inline unsigned long long sort_key(int v) { return (unsigned long long)((unsigned int)v ^ 0x80000000u); }
__device__ inline unsigned long long sort_key(long long v) { return (unsigned long long)v ^ (1ull << 63); }
__device__ inline unsigned long long sort_key(double d) {
  if (d != d) return ~0ull;
  if (d == 0) d = 0;  // -0.0 ties with 0.0
  const unsigned long long bits = (unsigned long long)__double_as_longlong(d);
  return bits >> 63 ? ~bits : bits | (1ull << 63);
}
__device__ inline unsigned long long sort_key(float v) { return sort_key((double)v); }
__device__ inline unsigned long long sort_key(Bf16 v) { return sort_key((double)(float)v); }
__device__ inline unsigned long long sort_key(F16 v) { return sort_key((double)(float)v); }

// Sorts positions [0, len) of a row ascending by (key, position) with the
// bitonic network whose every comparator puts the smaller pair first (each
// merge starts by comparing mirrored positions instead of flipping
// directions). The network is that of `padded` (a power of two >= len)
// elements, those past len standing for keys above every real one: a
// comparator that reaches past len never moves anything, so it is skipped.
// The step loops are the same for every thread of the block, so every
// thread reaches each barrier.
template <class Row>
__device__ void bitonic_sort(Row &row, long long len, long long padded) {
  for (long long size = 2; size <= padded; size *= 2)
    for (long long stride = size / 2; stride > 0; stride /= 2) {
      for (long long p = threadIdx.x; p < padded / 2; p += blockDim.x) {
        long long i, j;
        if (stride == size / 2) {
          const long long start = p / stride * size, o = p % stride;
          i = start + o;
          j = start + size - 1 - o;
        } else {
          i = p / stride * 2 * stride + p % stride;
          j = i + stride;
        }
        if (j < len) row.order(i, j);
      }
      __syncthreads();
    }
}

// A row held in shared memory: its keys and positions.
struct SharedRow {
  unsigned long long *keys;
  int *pos;
  __device__ void order(long long i, long long j) {
    if (keys[j] < keys[i] || (keys[j] == keys[i] && pos[j] < pos[i])) {
      const unsigned long long k = keys[i];
      keys[i] = keys[j];
      keys[j] = k;
      const int q = pos[i];
      pos[i] = pos[j];
      pos[j] = q;
    }
  }
};

// A row too long for shared memory: positions in out, keys read from x.
template <class T>
struct GlobalRow {
  long long *out;
  const T *x;
  long long inner;
  unsigned long long flip;
  __device__ void order(long long i, long long j) {
    const long long pi = out[i * inner], pj = out[j * inner];
    const unsigned long long ki = sort_key(x[pi * inner]) ^ flip, kj = sort_key(x[pj * inner]) ^ flip;
    if (kj < ki || (kj == ki && pj < pi)) {
      out[i * inner] = pj;
      out[j * inner] = pi;
    }
  }
};

template <class T>
__device__ void argsort(void *const *bufs, const long long *is, const long long *meta) {
  using namespace meta_layout::argsort;
  __shared__ unsigned long long keys[kTile];
  __shared__ int pos[kTile];
  long long *out = buffer<long long>(bufs, is, meta[kOut], 0);
  const T *x = buffer<const T>(bufs, is, meta[kX], meta[kXOffset]);
  const long long len = meta[kLen], inner = meta[kInner], rows = meta[kRows];
  const unsigned long long flip = meta[kDescending] ? ~0ull : 0ull;  // descending: NaN first
  long long padded = 1;
  while (padded < len) padded *= 2;
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const long long base = r / inner * len * inner + r % inner;
    if (len <= kTile) {
      for (long long k = threadIdx.x; k < len; k += blockDim.x) {
        keys[k] = sort_key(x[base + k * inner]) ^ flip;
        pos[k] = (int)k;
      }
      __syncthreads();
      SharedRow row{keys, pos};
      bitonic_sort(row, len, padded);
      for (long long k = threadIdx.x; k < len; k += blockDim.x) out[base + k * inner] = pos[k];
      __syncthreads();  // the next row refills the arrays
    } else {
      for (long long k = threadIdx.x; k < len; k += blockDim.x) out[base + k * inner] = k;
      __syncthreads();
      GlobalRow<T> row{out + base, x + base, inner, flip};
      bitonic_sort(row, len, padded);
    }
  }
}

// ------------------------------------------------------------------ scans
// The accumulator of a sum or product, as on the CPU (PyTorch's CPU
// accumulate types): float in double, bfloat16 in float, integers in their
// unsigned type (wrap-around), bool as or (sum) and and (product).
template <class T> struct ScanAcc { typedef T type; };
template <> struct ScanAcc<float> { typedef double type; };
template <> struct ScanAcc<Bf16> { typedef float type; };
template <> struct ScanAcc<F16> { typedef float type; };
template <> struct ScanAcc<int> { typedef unsigned int type; };
template <> struct ScanAcc<long long> { typedef unsigned long long type; };

template <class A>
__device__ inline A scan_combine(A acc, A v, long long kind) {
  return kind == meta_layout::scan::kSum ? acc + v : acc * v;
}
__device__ inline unsigned char scan_combine(unsigned char acc, unsigned char v, long long kind) {
  return kind == meta_layout::scan::kSum ? (acc | v) : (acc & v);
}

// One thread per row. Sums start from 0 and products from 1, as PyTorch's
// (so a row starting with -0.0 sums to 0.0). cummax / cummin keep the last
// position of a tie and move to every NaN they meet, as PyTorch's.
template <class T>
__device__ void scan(void *const *bufs, const long long *is, const long long *meta) {
  using namespace meta_layout::scan;
  typedef typename ScanAcc<T>::type A;
  const T *x = buffer<const T>(bufs, is, meta[kX], meta[kXOffset]);
  const long long len = meta[kLen], inner = meta[kInner], rows = meta[kRows], kind = meta[kKind];
  for (long long r = first_thread(); r < rows; r += thread_count()) {
    const long long base = r / inner * len * inner + r % inner;
    if (kind == kArgMax || kind == kArgMin) {
      long long *out = buffer<long long>(bufs, is, meta[kOut], 0);
      T best = x[base];
      long long at = 0;
      for (long long k = 0; k < len; ++k) {
        const T v = x[base + k * inner];
        if (v != v || (!(best != best) && (kind == kArgMax ? v >= best : v <= best))) {
          best = v;
          at = k;
        }
        out[base + k * inner] = at;
      }
    } else {
      T *out = buffer<T>(bufs, is, meta[kOut], 0);
      A acc = kind == kSum ? (A)0 : (A)1;
      for (long long k = 0; k < len; ++k) {
        acc = scan_combine(acc, (A)x[base + k * inner], kind);
        out[base + k * inner] = (T)acc;
      }
    }
  }
}

// ----------------------------------------------------------------- matmul
// The accumulator of each dtype: float32 in float32, float64 in double,
// integers in their unsigned type (wrap-around), bool as an or of ands.
__device__ inline float multiply_add(float acc, float a, float b) { return acc + a * b; }
__device__ inline double multiply_add(double acc, double a, double b) { return acc + a * b; }
__device__ inline unsigned int multiply_add(unsigned int acc, int a, int b) {
  return acc + (unsigned int)a * (unsigned int)b;
}
__device__ inline unsigned long long multiply_add(unsigned long long acc, long long a, long long b) {
  return acc + (unsigned long long)a * (unsigned long long)b;
}
__device__ inline unsigned char multiply_add(unsigned char acc, unsigned char a, unsigned char b) {
  return acc | (a != 0 && b != 0);
}

template <class T> struct Accumulator { typedef T type; };
template <> struct Accumulator<int> { typedef unsigned int type; };
template <> struct Accumulator<long long> { typedef unsigned long long type; };

// Each block computes kTile x kTile outputs, walking k in tiles of A and B
// staged in shared memory (zero outside the matrices). The loops over
// tiles are uniform across a block, so every thread reaches each barrier.
template <class T>
__device__ void matmul(void *const *bufs, const long long *is, const long long *meta) {
  using namespace meta_layout::matmul;
  typedef typename Accumulator<T>::type Acc;
  __shared__ T a_tile[kTile][kTile];
  __shared__ T b_tile[kTile][kTile];
  T *out = buffer<T>(bufs, is, meta[kOut], 0);
  const T *a = buffer<const T>(bufs, is, meta[kA], meta[kAOffset]);
  const T *b = buffer<const T>(bufs, is, meta[kB], meta[kBOffset]);
  const long long batch = meta[kBatch], M = meta[kM], N = meta[kN], K = meta[kK];
  const long long tiles_m = (M + kTile - 1) / kTile, tiles_n = (N + kTile - 1) / kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (long long bi = blockIdx.z; bi < batch; bi += gridDim.z)
    for (long long tm = blockIdx.y; tm < tiles_m; tm += gridDim.y)
      for (long long tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
        const long long row = tm * kTile + ty, col = tn * kTile + tx;
        Acc acc = 0;
        for (long long k0 = 0; k0 < K; k0 += kTile) {
          a_tile[ty][tx] = row < M && k0 + tx < K ? a[(bi * M + row) * K + k0 + tx] : T(0);
          b_tile[ty][tx] = k0 + ty < K && col < N ? b[(bi * K + k0 + ty) * N + col] : T(0);
          __syncthreads();
          for (int k = 0; k < kTile; ++k) acc = multiply_add(acc, a_tile[ty][k], b_tile[k][tx]);
          __syncthreads();
        }
        if (row < M && col < N) out[(bi * M + row) * N + col] = (T)acc;
      }
}

// ----------------------------------------------------------------- leaves

// A runtime scalar as T, as the CPU's from_scalar: bool is "either nonzero".
template <class T> __device__ inline T scalar_as(double f, long long i) { return (T)f; }
template <> __device__ inline int scalar_as<int>(double f, long long i) { return (int)i; }
template <> __device__ inline long long scalar_as<long long>(double f, long long i) { return i; }
template <> __device__ inline unsigned char scalar_as<unsigned char>(double f, long long i) {
  return f != 0.0 || i != 0;
}

// A double (or float) result stored as T: bool is "nonzero", as static_cast<bool>.
template <class T, class V> __device__ inline T store_as(V v) { return (T)v; }
template <> __device__ inline unsigned char store_as<unsigned char, double>(double v) { return v != 0.0; }

// Linspace's arithmetic, rounded op by op: the default contraction to fma
// would change the last bit against the CPU.
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline double div_rn(double a, double b) { return __ddiv_rn(a, b); }

// The step type: T for floating types (float for bfloat16), double for
// integers and bool.
template <class T> struct LinspaceStep { typedef double type; };
template <> struct LinspaceStep<float> { typedef float type; };
template <> struct LinspaceStep<Bf16> { typedef float type; };
template <> struct LinspaceStep<F16> { typedef float type; };

// PyTorch's symmetric linspace, as kernels/cpu: the first half counts up
// from start, the second half down from end, so both ends are exact.
template <class T>
__device__ void linspace(void *const *bufs, const double *fs, const long long *is, const long long *meta) {
  using namespace meta_layout::leaf;
  typedef typename LinspaceStep<T>::type S;
  T *out = buffer<T>(bufs, is, meta[kOut], 0);
  const long long n = meta[kNumel], s = meta[kScalarBegin];
  const T start = scalar_as<T>(fs[s], is[s]), end = scalar_as<T>(fs[s + 1], is[s + 1]);
  if (n == 1) {
    if (first_thread() == 0) out[0] = start;
    return;
  }
  const S step = div_rn(sub_rn((S)end, (S)start), (S)(n - 1));
  const long long half = n / 2;
  for (long long i = first_thread(); i < n; i += thread_count()) {
    if (i < half) out[i] = store_as<T>(add_rn((S)start, mul_rn(step, (S)i)));
    else out[i] = store_as<T>(sub_rn((S)end, mul_rn(step, (S)(n - 1 - i))));
  }
}

// A uniform double as T; float32 never rounds up to 1.0f.
template <class T> __device__ inline T uniform_as(double u) { return store_as<T>(u); }
template <> __device__ inline float uniform_as<float>(double u) { return loom::ir::philox::uniform_f32(u); }

// Element i is Philox(seed, counter = offset + i): ir/philox.h, the same
// text the CPU compiles, so the values match whatever the grid.
template <class T, bool kNormal>
__device__ void philox_fill(void *const *bufs, const long long *is, const long long *meta) {
  using namespace meta_layout::leaf;
  namespace philox = loom::ir::philox;
  T *out = buffer<T>(bufs, is, meta[kOut], 0);
  const long long s = meta[kScalarBegin];
  const unsigned long long seed = (unsigned long long)is[s], offset = (unsigned long long)is[s + 1];
  for (long long i = first_thread(); i < meta[kNumel]; i += thread_count()) {
    if (kNormal) out[i] = store_as<T>(philox::normal(seed, offset, (unsigned long long)i));
    else out[i] = uniform_as<T>(philox::uniform(seed, offset, (unsigned long long)i));
  }
}

}  // namespace loom::kernels::cuda::device

// ------------------------------------------------------------ entry points
// The names plan_library launches (library.cpp). They are extern "C", so
// the namespace does not enter their names. Data movement picks its word by
// the element size; the typed kernels end in _b8, _i32, _i64, _f32, _f64 (and
// _bf16 and _f16 for five of them; argsort's and scan's suffix is their input's dtype).

namespace loom::kernels::cuda {

// Each entry point a macro, so that a module can hold one kernel: at run
// time each is a module of its own (library.cpp library_function_source
// defines LOOM_LIBRARY_ENTRY as one of them; all of them in one module took
// NVRTC 4.4-5.8 s on the H200 machine's host, on a model's first call).
// Without LOOM_LIBRARY_ENTRY, every one (the source tests compile).
#define LOOM_LIBRARY_BY_SIZE(NAME, FN, LAYOUT, ...)                                   \
  extern "C" __global__ void NAME(LOOM_LIBRARY_PARAMS) {                                \
    switch (meta[meta_layout::LAYOUT::kElementSize]) {                                  \
      case 1: return device::FN<unsigned char>(__VA_ARGS__);                            \
      case 2: return device::FN<unsigned short>(__VA_ARGS__);                           \
      case 4: return device::FN<unsigned int>(__VA_ARGS__);                             \
      default: return device::FN<unsigned long long>(__VA_ARGS__);                     \
    }                                                                                   \
  }
#define LOOM_LIBRARY_COPY_2D LOOM_LIBRARY_BY_SIZE(loom_copy_2d, copy_2d, copy2d, bufs, is, meta)
#define LOOM_LIBRARY_INDEX_SELECT \
  LOOM_LIBRARY_BY_SIZE(loom_index_select, index_select, index_select, bufs, is, err, meta)
#define LOOM_LIBRARY_GATHER LOOM_LIBRARY_BY_SIZE(loom_gather, gather, gather_scatter, bufs, is, err, meta)
#define LOOM_LIBRARY_CHECK_INDEX \
  extern "C" __global__ void loom_check_index(LOOM_LIBRARY_PARAMS) { device::check_index(bufs, is, err, meta); }
#define LOOM_LIBRARY_SCATTER_STRIDED \
  LOOM_LIBRARY_BY_SIZE(loom_scatter_strided, scatter_strided, scatter_strided, bufs, is, meta)
// The typed ones: loom_<op>_<suffix>, T the element type.
#define LOOM_LIBRARY_SCATTER_ADD(suffix, T) \
  extern "C" __global__ void loom_scatter_add_##suffix(LOOM_LIBRARY_PARAMS) { device::scatter_add<T>(bufs, is, err, meta); }
#define LOOM_LIBRARY_SCATTER_REDUCE(suffix, T)                                             \
  extern "C" __global__ void loom_scatter_reduce_##suffix(LOOM_LIBRARY_PARAMS) {           \
    device::scatter_reduce<T>(bufs, is, err, meta);                                        \
  }
#define LOOM_LIBRARY_LINSPACE(suffix, T) \
  extern "C" __global__ void loom_linspace_##suffix(LOOM_LIBRARY_PARAMS) { device::linspace<T>(bufs, fs, is, meta); }
#define LOOM_LIBRARY_ARGSORT(suffix, T) \
  extern "C" __global__ void loom_argsort_##suffix(LOOM_LIBRARY_PARAMS) { device::argsort<T>(bufs, is, meta); }
#define LOOM_LIBRARY_SCAN(suffix, T) \
  extern "C" __global__ void loom_scan_##suffix(LOOM_LIBRARY_PARAMS) { device::scan<T>(bufs, is, meta); }
#define LOOM_LIBRARY_MATMUL(suffix, T) \
  extern "C" __global__ void loom_matmul_##suffix(LOOM_LIBRARY_PARAMS) { device::matmul<T>(bufs, is, meta); }
#define LOOM_LIBRARY_RAND_UNIFORM(suffix, T)                                               \
  extern "C" __global__ void loom_rand_uniform_##suffix(LOOM_LIBRARY_PARAMS) {             \
    device::philox_fill<T, false>(bufs, is, meta);                                         \
  }
#define LOOM_LIBRARY_RAND_NORMAL(suffix, T)                                                \
  extern "C" __global__ void loom_rand_normal_##suffix(LOOM_LIBRARY_PARAMS) {              \
    device::philox_fill<T, true>(bufs, is, meta);                                          \
  }

#ifdef LOOM_LIBRARY_ENTRY
LOOM_LIBRARY_ENTRY
#else
LOOM_LIBRARY_COPY_2D
LOOM_LIBRARY_INDEX_SELECT
LOOM_LIBRARY_GATHER
LOOM_LIBRARY_CHECK_INDEX
LOOM_LIBRARY_SCATTER_STRIDED
// What every dtype has: scatter_add, scatter_reduce, linspace, argsort, scan.
#define LOOM_SHARED_KERNELS(suffix, T) \
  LOOM_LIBRARY_SCATTER_ADD(suffix, T)  \
  LOOM_LIBRARY_SCATTER_REDUCE(suffix, T) LOOM_LIBRARY_LINSPACE(suffix, T) LOOM_LIBRARY_ARGSORT(suffix, T) LOOM_LIBRARY_SCAN(suffix, T)
// The full-width dtypes add products and random numbers.
#define LOOM_TYPED_KERNELS(suffix, T) \
  LOOM_SHARED_KERNELS(suffix, T)      \
  LOOM_LIBRARY_MATMUL(suffix, T) LOOM_LIBRARY_RAND_UNIFORM(suffix, T) LOOM_LIBRARY_RAND_NORMAL(suffix, T)
LOOM_TYPED_KERNELS(b8, unsigned char)
LOOM_TYPED_KERNELS(i32, int)
LOOM_TYPED_KERNELS(i64, long long)
LOOM_TYPED_KERNELS(f32, float)
LOOM_TYPED_KERNELS(f64, double)
// bfloat16 and float16 reach only the shared ones: their products are GEMM
// kernels and their random numbers are generated in place (library.cpp's
// typed_suffix).
LOOM_SHARED_KERNELS(bf16, device::Bf16)
LOOM_SHARED_KERNELS(f16, device::F16)
#undef LOOM_TYPED_KERNELS
#undef LOOM_SHARED_KERNELS
#endif

}  // namespace loom::kernels::cuda
