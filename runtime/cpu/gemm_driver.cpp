#include "runtime/cpu/gemm_driver.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>
#ifdef __SSE2__
#include <immintrin.h>
#endif

#include "runtime/host_allocator.h"

namespace loom::runtime::cpu {

namespace {

using jit::llvm_cpu::GemmFn;
using jit::llvm_cpu::GemmTile;

int64_t sys_cache(int level) {
  // /sys/devices/system/cpu/cpu0/cache/index<i>: level, type, size ("32K").
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream lf(dir + "level"), tf(dir + "type"), sf(dir + "size");
    int lv = 0;
    std::string type, size;
    if (!(lf >> lv) || !(tf >> type) || !(sf >> size)) break;
    if (lv != level || type == "Instruction" || size.empty()) continue;
    int64_t v = std::stoll(size);
    const char unit = size.back();
    return unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : v;
  }
  return 0;
}

}  // namespace

const CacheSizes& host_caches() {
  static const CacheSizes c = [] {
    auto size = [](int name, int level, int64_t fallback) {
      int64_t v = sysconf(name);
      if (v <= 0) v = sys_cache(level);
      return v > 0 ? v : fallback;
    };
    return CacheSizes{size(_SC_LEVEL1_DCACHE_SIZE, 1, 32 << 10), size(_SC_LEVEL2_CACHE_SIZE, 2, 1 << 20),
                      size(_SC_LEVEL3_CACHE_SIZE, 3, 8 << 20)};
  }();
  return c;
}

GemmPlan plan_gemm(const ir::KernelProgram& p, const ir::Kernel& k, const ir::SizeArgs* sizes) {
  GemmPlan g;
  const ir::Contraction& c = *k.contraction;
  const int n = k.loop.n;
  const ir::Access& a = k.accesses[c.a];
  const ir::Access& b = k.accesses[c.b];
  g.dtype = p.buffers[a.buffer].dtype;
  g.shape = jit::llvm_cpu::gemm_shape(jit::llvm_cpu::host_target(), g.dtype);
  g.batch = n == 3 ? k.loop[0] : 1;
  g.m = k.loop[n - 2], g.n = k.loop[n - 1], g.k = c.k;
  g.a_buf = a.buffer, g.a_off = a.offset, g.a_sb = n == 3 ? a.strides[0] : 0, g.a_sm = a.strides[n - 2], g.a_sk = c.a_k;
  g.b_buf = b.buffer, g.b_off = b.offset, g.b_sb = n == 3 ? b.strides[0] : 0, g.b_sn = b.strides[n - 1], g.b_sk = c.b_k;
  g.a_off_scalar = a.offset_scalar, g.b_off_scalar = b.offset_scalar;
  const int64_t e = element_size(g.dtype);

  std::vector<bool> stored(k.accesses.size(), false);
  for (const ir::Phase& ph : k.phases)
    for (auto [ai, x] : ph.stores) stored[ai] = true;
  for (size_t ai = 0; ai < k.accesses.size(); ++ai) {
    const uint32_t buf = k.accesses[ai].buffer;
    if (!stored[ai]) g.reads.push_back({buf, p.buffers[buf].numel * element_size(p.buffers[buf].dtype)});
  }
  for (auto [ai, x] : k.phases.at(0).stores) {
    const ir::Access& o = k.accesses[ai];
    const ir::BufferInfo& info = p.buffers[o.buffer];
    const bool read_too = std::any_of(g.reads.begin(), g.reads.end(), [&](auto r) { return r.first == o.buffer; });
    if (info.dtype != g.dtype || k.exprs[x].dtype != g.dtype || o.strides[n - 1] != 1 || o.strides[n - 2] < g.n ||
        read_too || o.has_runtime_offset() || !ir::never_overlaps(k.loop, o.strides.begin()))
      continue;
    g.out_buf = o.buffer, g.out_off = o.offset, g.out_sb = n == 3 ? o.strides[0] : 0, g.out_sm = o.strides[n - 2];
    g.out_bytes = info.numel * e;
    break;
  }

  // Blocks from the caches: a KC x NR strip of B, reused by every A panel
  // of the block, takes an eighth of L2, and the A panel streaming past it
  // comes from L2 too (with the hardware prefetcher's help; a tile's loads
  // are a few bytes a cycle, far below what L2 gives). A deep KC means few
  // K blocks, so few passes over the partial sums in C. Zen 4 (1 MiB L2,
  // float, 12 x 32 tiles; CPU time of six W6 products, three rounds):
  // KC 1024 9.44-9.64 s, 512 9.44-9.68, 2048 9.76-9.96, 256 (a strip the
  // size of L1, before) 9.72-9.99; W6 ~192 -> ~203 GFLOP/s, G1 687-697 ->
  // 660-675 ms. (KC 256 in turn ran W6 ~10% faster than 136.) A KC x NC
  // panel of B takes a quarter of L3 (shared by the threads).
  //
  // An MC x KC block of A takes twice L2: with strip groups (below) the
  // L2-resident operand is the group of B strips, each A panel is read
  // once per group from wherever the block lies, and every MC block reads
  // all of the packed B panel again, so a taller block means fewer passes
  // over B. Zen 3 (512 KiB L2, KC 1024), one process, rules alternating
  // call by call, medians: 4096^3 1029-1150 -> 975-1028 ms with blocks of
  // 200 to 600 rows against 108 (A in the rest of L2, as this was
  // before; Zen 4 likewise preferred 216 rows to 120), 2048^3 136.7-138.6
  // -> 126.8-130.6; W4's step the same (its blocks are set by the thread
  // rule in run_packed_one).
  const CacheSizes& cs = host_caches();
  const int64_t mr = g.shape.mr, nr = g.shape.nr;
  g.kc = std::clamp<int64_t>(cs.l2 / 8 / (nr * e) / 8 * 8, 64, 1024);
  if (const char* v = std::getenv("LOOM_GEMM_KC")) g.kc = std::atoll(v);  // tuning experiments
  // K split evenly: no thin last block paying a full pass over the
  // partial sums for a few k (K = 1000, KC 256: 3 x 252 + 244, not
  // 3 x 256 + 232), a multiple of the tile function's K unroll (4).
  if (g.k > 0) {
    const int64_t blocks = (g.k + g.kc - 1) / g.kc;
    g.kc = ((g.k + blocks - 1) / blocks + 3) / 4 * 4;
  }
  g.mc = std::max<int64_t>(mr, 2 * cs.l2 / (g.kc * e) / mr * mr);
  g.nc = std::max<int64_t>(nr, cs.l3 / 4 / (g.kc * e) / nr * nr);
  // A group of B strips that takes half of L2 (16 strips for KC 256, 4
  // for KC 1024 on a 512 KiB L2), met in turn by each A panel: the tiles'
  // epilogue then walks each row of C (and of every buffer it reads or
  // updates) for group x NR elements, which the hardware prefetcher
  // follows; one strip at a time touched one line per row, 4 KiB apart
  // for a 1024-wide C, then the next. Zen 3, one process, configurations
  // alternating, p25 ms: W4's [1024, 256] x [256, 1024] weight gradient
  // with its SGD update fused 5.9-6.1 (one strip) -> 5.1-5.3 (16 or 64
  // strips), the product alone 4.5 either way; W4's whole step 26.2-26.7
  // -> 24.9-25.2 (16), 25.0-25.1 (64). Plain large products alike within
  // 1% (2048^3: 8 strips 1-3% slower than 1, 4 the same).
  g.strip_group = std::max<int64_t>(1, cs.l2 / 2 / (g.kc * nr * e));
  if (const char* v = std::getenv("LOOM_GEMM_SG")) g.strip_group = std::max<int64_t>(1, std::atoll(v));
  g.prepare_a = c.fused_operand(0), g.prepare_b = c.fused_operand(1);
  // Packing pays when its panels are reused: skip it when A is no taller
  // than a tile or B fits in half of L2 (it stays there as it is).
  g.direct = g.k == 0 || g.m <= mr || g.k * g.n * e <= cs.l2 / 2;
  g.dot = jit::llvm_cpu::gemm_dot_product(k, g.shape, sizes);
  g.direct = g.direct || g.dot;  // a dot kernel has no other path
  // Tuning experiments: LOOM_GEMM_MC / _NC (and _KC, _SG above; the test
  // of strip groups sets _SG).
  if (const char* v = std::getenv("LOOM_GEMM_MC")) g.mc = std::atoll(v) / mr * mr;
  if (const char* v = std::getenv("LOOM_GEMM_NC")) g.nc = std::atoll(v) / nr * nr;
  return g;
}

namespace {

// 64-byte aligned scratch from the caching host allocator (no page faults
// once warm).
struct Scratch {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Scratch(size_t n) : p(n ? host_allocate(n) : nullptr), bytes(n) {}
  ~Scratch() {
    if (p) host_free(p, bytes);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

// dst[t * ld + r] = src[r * rs + t] for r < h, t < kc, rows h..ld zero:
// a panel (or strip) packed k-major from rows that are contiguous along K
// (A row-major, or Linear's W read as B = W^T). Rows go through register
// transposes, reading several streams and writing whole vectors, where a
// scalar loop writes one element per instruction at stride `ld`: eight rows
// by eight k with AVX2 where the kernels are built for it (host_target:
// chosen at run time, LOOM_CPU_ISA included; the library itself is built
// for baseline x86-64), four by four with SSE (the baseline), and the last
// two rows of a 6-row panel (MR on AVX2) as pairs.
// Zen 3, a 1024 x 1024 B in strips of 16: 0.31-0.39 ms (4 x 4) -> 0.25-0.29
// (8 x 8); in W4, packing was 14% of the step's CPU time (perf), 4 x 4
// rows plus two rows a scalar at a time for A's 6-row panels.
#ifdef __SSE2__
__attribute__((target("avx2"))) int64_t pack_rows_by_8(const float* src, int64_t rs, int64_t h, int64_t kc, int64_t ld,
                                                      float* dst) {
  int64_t r = 0;
  for (; r + 8 <= h; r += 8) {
    const float* s = src + r * rs;
    int64_t t = 0;
    for (; t + 8 <= kc; t += 8) {
      __m256 x[8];
      for (int q = 0; q < 8; ++q) x[q] = _mm256_loadu_ps(s + q * rs + t);
      // Pairs, then quads, then 128-bit halves: row q's k = t + c lands in
      // lane q of output c.
      __m256 p0 = _mm256_unpacklo_ps(x[0], x[1]), p1 = _mm256_unpackhi_ps(x[0], x[1]);
      __m256 p2 = _mm256_unpacklo_ps(x[2], x[3]), p3 = _mm256_unpackhi_ps(x[2], x[3]);
      __m256 p4 = _mm256_unpacklo_ps(x[4], x[5]), p5 = _mm256_unpackhi_ps(x[4], x[5]);
      __m256 p6 = _mm256_unpacklo_ps(x[6], x[7]), p7 = _mm256_unpackhi_ps(x[6], x[7]);
      __m256 q0 = _mm256_shuffle_ps(p0, p2, 0x44), q1 = _mm256_shuffle_ps(p0, p2, 0xEE);
      __m256 q2 = _mm256_shuffle_ps(p1, p3, 0x44), q3 = _mm256_shuffle_ps(p1, p3, 0xEE);
      __m256 q4 = _mm256_shuffle_ps(p4, p6, 0x44), q5 = _mm256_shuffle_ps(p4, p6, 0xEE);
      __m256 q6 = _mm256_shuffle_ps(p5, p7, 0x44), q7 = _mm256_shuffle_ps(p5, p7, 0xEE);
      float* d = dst + t * ld + r;
      _mm256_storeu_ps(d, _mm256_permute2f128_ps(q0, q4, 0x20));
      _mm256_storeu_ps(d + ld, _mm256_permute2f128_ps(q1, q5, 0x20));
      _mm256_storeu_ps(d + 2 * ld, _mm256_permute2f128_ps(q2, q6, 0x20));
      _mm256_storeu_ps(d + 3 * ld, _mm256_permute2f128_ps(q3, q7, 0x20));
      _mm256_storeu_ps(d + 4 * ld, _mm256_permute2f128_ps(q0, q4, 0x31));
      _mm256_storeu_ps(d + 5 * ld, _mm256_permute2f128_ps(q1, q5, 0x31));
      _mm256_storeu_ps(d + 6 * ld, _mm256_permute2f128_ps(q2, q6, 0x31));
      _mm256_storeu_ps(d + 7 * ld, _mm256_permute2f128_ps(q3, q7, 0x31));
    }
    for (; t < kc; ++t)
      for (int q = 0; q < 8; ++q) dst[t * ld + r + q] = s[q * rs + t];
  }
  return r;
}
#endif

template <class T>
void pack_transposed(const T* src, int64_t rs, int64_t h, int64_t kc, int64_t ld, T* dst) {
  int64_t r = 0;
#ifdef __SSE2__
  if constexpr (std::is_same_v<T, float>) {
    if (jit::llvm_cpu::host_target().vector_width >= 8) r = pack_rows_by_8(src, rs, h, kc, ld, dst);  // AVX2
    for (; r + 4 <= h; r += 4) {
      const float* s0 = src + r * rs;
      const float *s1 = s0 + rs, *s2 = s1 + rs, *s3 = s2 + rs;
      int64_t t = 0;
      for (; t + 4 <= kc; t += 4) {
        __m128 x0 = _mm_loadu_ps(s0 + t), x1 = _mm_loadu_ps(s1 + t), x2 = _mm_loadu_ps(s2 + t), x3 = _mm_loadu_ps(s3 + t);
        _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
        float* d = dst + t * ld + r;
        _mm_storeu_ps(d, x0), _mm_storeu_ps(d + ld, x1), _mm_storeu_ps(d + 2 * ld, x2), _mm_storeu_ps(d + 3 * ld, x3);
      }
      for (; t < kc; ++t)
        for (int q = 0; q < 4; ++q) dst[t * ld + r + q] = src[(r + q) * rs + t];
    }
    if (r + 2 <= h) {  // two rows: (row r, row r + 1) pairs, 8 bytes a k
      const float *s0 = src + r * rs, *s1 = s0 + rs;
      int64_t t = 0;
      for (; t + 4 <= kc; t += 4) {
        const __m128 x0 = _mm_loadu_ps(s0 + t), x1 = _mm_loadu_ps(s1 + t);
        const __m128 lo = _mm_unpacklo_ps(x0, x1), hi = _mm_unpackhi_ps(x0, x1);
        float* d = dst + t * ld + r;
        _mm_storel_pi(reinterpret_cast<__m64*>(d), lo), _mm_storeh_pi(reinterpret_cast<__m64*>(d + ld), lo);
        _mm_storel_pi(reinterpret_cast<__m64*>(d + 2 * ld), hi), _mm_storeh_pi(reinterpret_cast<__m64*>(d + 3 * ld), hi);
      }
      for (; t < kc; ++t) dst[t * ld + r] = s0[t], dst[t * ld + r + 1] = s1[t];
      r += 2;
    }
  }
#endif
  for (; r < h; ++r)
    for (int64_t t = 0; t < kc; ++t) dst[t * ld + r] = src[r * rs + t];
  if (h < ld)
    for (int64_t t = 0; t < kc; ++t) std::fill(dst + t * ld + h, dst + (t + 1) * ld, T(0));
}

// Panels [p0, p1) of `width` elements along a dimension that is
// contiguous in memory (element (t, c) at src[t * sk + c], c < n), each
// k-major and zero padded past n: A's panels of a transposed A, B's strips
// of a row-major B. A few rows t at a time, each panel's part of them in
// turn, so the source is read along its rows; panel by panel read `width`
// elements from each of kc rows, 4 KiB apart for a 1024-wide float matrix,
// one page after another, which the hardware prefetcher does not follow. Zen 3,
// configurations alternating in one process, p25: [256, 1024] x [1024,
// 1024] (W4's gradient of h1, B row-major) 4.52-4.70 -> 4.27-4.35 ms, with
// its ReLU mask 5.17-5.25 -> 4.71, 1024^3 16.75 -> 16.13; W4's weight
// gradients (A = x^T) 4.46-4.53 -> 4.32-4.41 (1024 x 1024, K 256) and
// 4.25-4.48 -> 4.17-4.32 (1024 x 784 with its SGD update).
//
// W: the width as a constant (0: `width` at run time), so a whole piece is
// a copy of known size the compiler writes as a few vector moves; a call
// to memcpy for each 24- or 64-byte piece was 7% of W4's CPU time (perf).
// With pack_transposed's wider transposes, W4's step on Zen 3 in one
// process, the old and new packing alternating step by step (three runs of
// 40 steps each): medians 24.8-25.6 -> 23.5-23.9 ms, p25 23.8-24.5 ->
// 22.4-23.1; packing 14.9% -> 10.0% of the step's CPU time.
template <class T, int W>
void pack_along_rows_w(const T* src, int64_t sk, int64_t n, int64_t kc, int64_t width, T* dst, int64_t p0,
                       int64_t p1) {
  const int64_t wd = W ? W : width;
  const int64_t full_end = std::min(p1, n / wd);  // panels [p0, full_end) are whole
  // Eight rows at a time: each panel then gets 8 x width contiguous
  // elements in turn, where one row at a time wrote a piece to every panel
  // (hundreds of write streams, a line filled over several rows).
  constexpr int64_t kRows = 8;
  for (int64_t t0 = 0; t0 < kc; t0 += kRows) {
    const int64_t t1 = std::min(kc, t0 + kRows);
    for (int64_t p = p0; p < full_end; ++p) {
      const T* s = src + t0 * sk + p * wd;
      T* o = dst + (p * kc + t0) * wd;
      for (int64_t t = t0; t < t1; ++t, s += sk, o += wd) std::memcpy(o, s, wd * sizeof(T));
    }
    for (int64_t p = std::max(p0, full_end); p < p1; ++p) {  // the last panel, past n
      const int64_t c = p * wd, w = std::min(wd, n - c);
      for (int64_t t = t0; t < t1; ++t) {
        T* o = dst + (p * kc + t) * wd;
        std::memcpy(o, src + t * sk + c, w * sizeof(T));
        std::fill(o + w, o + wd, T(0));
      }
    }
  }
}

// The panel widths of every target's tile (jit/llvm/gemm.h gemm_shape: MR
// 4, 6 or 12; NR 4 to 32) get a constant-width copy.
template <class T>
void pack_along_rows(const T* src, int64_t sk, int64_t n, int64_t kc, int64_t width, T* dst, int64_t p0, int64_t p1) {
  switch (width) {
    case 4: return pack_along_rows_w<T, 4>(src, sk, n, kc, width, dst, p0, p1);
    case 6: return pack_along_rows_w<T, 6>(src, sk, n, kc, width, dst, p0, p1);
    case 8: return pack_along_rows_w<T, 8>(src, sk, n, kc, width, dst, p0, p1);
    case 12: return pack_along_rows_w<T, 12>(src, sk, n, kc, width, dst, p0, p1);
    case 16: return pack_along_rows_w<T, 16>(src, sk, n, kc, width, dst, p0, p1);
    case 32: return pack_along_rows_w<T, 32>(src, sk, n, kc, width, dst, p0, p1);
    default: return pack_along_rows_w<T, 0>(src, sk, n, kc, width, dst, p0, p1);
  }
}

// B[k0:k0+kc, j0:j0+nc] (strides sk, sn) -> strips of nr columns, k-major
// inside a strip, zero padded to whole strips; strips [s0, s1) only.
template <class T>
void pack_b(const T* b, int64_t sk, int64_t sn, int64_t kc, int64_t nc, int64_t nr, T* dst, int64_t s0, int64_t s1) {
  if (sn == 1) return pack_along_rows(b, sk, nc, kc, nr, dst, s0, s1);
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t j = s * nr, w = std::min(nr, nc - j);
    T* out = dst + s * kc * nr;
    if (sk == 1) {  // a transposed B (Linear's x W^T): W's rows are B's columns
      pack_transposed(b + j * sn, sn, w, kc, nr, out);
      continue;
    }
    for (int64_t t = 0; t < kc; ++t) {
      const T* src = b + t * sk + j * sn;
      T* o = out + t * nr;
      for (int64_t c = 0; c < w; ++c) o[c] = src[c * sn];
      std::fill(o + w, o + nr, T(0));
    }
  }
}

// A[i0:i0+mc, k0:k0+kc] (strides sm, sk) -> panels of mr rows, k-major
// inside a panel, zero padded.
template <class T>
void pack_a(const T* a, int64_t sm, int64_t sk, int64_t mc, int64_t kc, int64_t mr, T* dst) {
  // A transposed A (a weight gradient's x^T): each k's rows are contiguous.
  if (sm == 1) return pack_along_rows(a, sk, mc, kc, mr, dst, 0, (mc + mr - 1) / mr);
  for (int64_t i = 0; i < mc; i += mr) {
    const int64_t h = std::min(mr, mc - i);
    T* out = dst + i * kc;
    if (sk == 1) {  // row-major A
      pack_transposed(a + i * sm, sm, h, kc, mr, out);
      continue;
    }
    for (int64_t r = 0; r < mr; ++r) {
      if (r < h) {
        const T* src = a + (i + r) * sm;
        for (int64_t t = 0; t < kc; ++t) out[t * mr + r] = src[t * sk];
      } else {
        for (int64_t t = 0; t < kc; ++t) out[t * mr + r] = T(0);
      }
    }
  }
}

// Groups the column tiles (strips) of a product are split into beside its
// `row_tasks` row blocks or tiles, so that each of `threads` threads gets
// about two tasks: a short M or a small batch leaves threads idle otherwise.
int64_t column_groups(int64_t row_tasks, int64_t strips, int64_t threads) {
  return threads > 1 && row_tasks < 2 * threads ? std::min(strips, (2 * threads + row_tasks - 1) / row_tasks) : 1;
}

struct Ctx {
  const GemmPlan& g;
  GemmFn fn;
  void* const* bufs;
  const double* fs;
  const int64_t* is;
  jit::llvm_cpu::KernelError& err;  // the first tile's report of bad data (rare: under a lock)
  std::mutex& err_mu;
  int threads;
  void call(GemmTile& t) const {
    jit::llvm_cpu::KernelError e;
    fn(&t, bufs, fs, is, &e);
    if (e.word == 0) return;
    std::lock_guard lock(err_mu);
    if (err.word == 0) err = e;
  }
  // Applies operand A's (B's) fused producers to `count` packed elements.
  void prepare(bool b_side, void* panel, int64_t count) const {
    GemmTile t{};
    (b_side ? t.b : t.a) = panel;
    t.kc = count;
    t.flags = b_side ? jit::llvm_cpu::kGemmPrepareB : jit::llvm_cpu::kGemmPrepareA;
    call(t);
  }
};

template <class T>
const T* elem(void* const* bufs, uint32_t b, int64_t off) {
  return static_cast<const T*>(bufs[b]) + off;
}

// Small products: A in place; B in place when its rows are contiguous, or,
// in a product shorter or narrower than a tile with A and B both
// contiguous along K (x W^T at batch 1, a classifier's logits:
// GemmPlan::dot), read in place as dot products; else packed whole (it is
// small, or A is a single tile high). An operand with fused producers is
// copied (A, row-major) or packed (B) and prepared first: it is small here.
template <class T>
void run_direct(const Ctx& x) {
  const GemmPlan& g = x.g;
  const int64_t mr = g.shape.mr, nr = g.shape.nr;
  const int64_t mt = (g.m + mr - 1) / mr, nt = (g.n + nr - 1) / nr;
  const bool copy_a = g.prepare_a && g.k > 0;
  const bool pack = !g.dot && (g.b_sn != 1 || g.prepare_b) && g.k > 0;
  const int64_t strip = g.k * nr;
  Scratch packed(pack ? static_cast<size_t>(g.batch * nt * strip) * sizeof(T) : 0);
  T* bp = static_cast<T*>(packed.p);
  const T* A = elem<T>(x.bufs, g.a_buf, g.a_at(x.is));
  const T* B = elem<T>(x.bufs, g.b_buf, g.b_at(x.is));
  int64_t a_sb = g.a_sb, a_sm = g.a_sm, a_sk = g.a_sk;
  Scratch a_copy(copy_a ? static_cast<size_t>(g.batch * g.m * g.k) * sizeof(T) : 0);
  if (copy_a) {
    T* ac = static_cast<T*>(a_copy.p);
    for (int64_t bi = 0; bi < g.batch; ++bi)
      for (int64_t i = 0; i < g.m; ++i)
        for (int64_t t = 0; t < g.k; ++t) ac[(bi * g.m + i) * g.k + t] = A[bi * a_sb + i * a_sm + t * a_sk];
    x.prepare(false, ac, g.batch * g.m * g.k);
    A = ac, a_sb = g.m * g.k, a_sm = g.k, a_sk = 1;
  }
  if (pack)
    for (int64_t bi = 0; bi < g.batch; ++bi) {
      pack_b(B + bi * g.b_sb, g.b_sk, g.b_sn, g.k, g.n, nr, bp + bi * nt * strip, 0, nt);
      if (g.prepare_b) x.prepare(true, bp + bi * nt * strip, nt * strip);
    }
  // A long K is summed in blocks of KC, each block's sum added to the
  // tile's running total (kept in `part`), as the packed path does: one
  // register chain over all of K (a dot product of 35640 terms) loses
  // ~K ulp where blocks lose ~(KC + K/KC).
  const int64_t b_ks = pack ? nr : g.b_sk;
  const double work = static_cast<double>(g.batch) * g.m * g.n * std::max<int64_t>(g.k, 1);
  const int64_t threads = work >= (1 << 18) ? x.threads : 1;
  // A single row with B read in place goes 2 NR columns a call
  // (kGemmWide: one broadcast of A for twice the FMAs, half the calls).
  const bool wide = g.m == 1 && !g.dot && !pack;
  const int64_t width = wide ? 2 * nr : nr, tiles = (g.n + width - 1) / width;
  const int64_t groups = column_groups(g.batch * mt, tiles, threads);
  auto rows = [&](int64_t task) {  // (batch, row tile, group of column tiles)
    const int64_t r = task / groups, gi = task % groups;
    const int64_t bi = r / mt, i = r % mt * mr;
    std::vector<T> part(g.k > g.kc ? static_cast<size_t>(mr * nr) : 0);
    GemmTile t{};
    t.a_rs = a_sm, t.a_ks = a_sk, t.b_ks = g.dot ? g.b_sn : b_ks;
    t.batch = bi, t.i = i, t.rows = std::min(mr, g.m - i);
    t.partial = part.empty() ? nullptr : part.data(), t.ldp = nr;
    for (int64_t j = tiles * gi / groups * width; j < tiles * (gi + 1) / groups * width && j < g.n; j += width) {
      const T* b0 = pack  ? static_cast<const T*>(bp + bi * nt * strip + j / nr * strip)
                    : g.dot ? B + bi * g.b_sb + j * g.b_sn
                          : B + bi * g.b_sb + j;
      t.j = j, t.cols = std::min(width, g.n - j);
      for (int64_t pc = 0; pc < g.k || pc == 0; pc += g.kc) {
        t.kc = std::min(g.kc, g.k - pc);
        t.a = A + bi * a_sb + i * a_sm + pc * a_sk;
        t.b = b0 + pc * b_ks;
        t.flags = jit::llvm_cpu::kGemmDirect | (pc > 0 ? jit::llvm_cpu::kGemmAddPartial : 0) |
                  (pc + g.kc >= g.k ? jit::llvm_cpu::kGemmLast : 0) | (g.m < mr ? jit::llvm_cpu::kGemmShort : 0) |
                  (wide ? jit::llvm_cpu::kGemmWide : 0);
        x.call(t);
      }
    }
  };
  const int64_t tasks = g.batch * mt * groups;
  if (tasks > 1 && threads > 1)
    tbb::parallel_for(int64_t(0), tasks, rows);
  else
    for (int64_t r = 0; r < tasks; ++r) rows(r);
}

// One product of the batch, packed. `parallel`: split it over the threads
// (false when the batch's products run one per task).
template <class T>
void run_packed_one(const Ctx& x, int64_t bi, bool parallel, T* scratch) {
  const GemmPlan& g = x.g;
  const int64_t mr = g.shape.mr, nr = g.shape.nr;
  const T* A = elem<T>(x.bufs, g.a_buf, g.a_at(x.is)) + bi * g.a_sb;
  const T* B = elem<T>(x.bufs, g.b_buf, g.b_at(x.is)) + bi * g.b_sb;
  T* part;
  int64_t ldp;
  if (scratch) {
    part = scratch + bi * g.m * g.n, ldp = g.n;
  } else if (g.out_buf >= 0) {
    part = static_cast<T*>(x.bufs[g.out_buf]) + g.out_off + bi * g.out_sb, ldp = g.out_sm;
  } else {  // one K block: no partial sums
    part = nullptr, ldp = 0;
  }
  // MC balanced over the threads: a whole number of blocks per thread, at
  // least two each where a block still has 8 panels (one thread's second
  // block can then be taken by the other when one is slowed: W4's 256-row
  // products in 4 blocks, not 1 split by columns, whose A each column group
  // packs again), and the MR-row panels spread evenly over the blocks
  // (their sizes differ by one panel at most: 256 rows in 4 blocks are 60,
  // 66, 66 and 64 rows, not 72, 72, 72 and 40). Fewer rows than that: the
  // columns are split too (column_groups).
  const int64_t panels = (g.m + mr - 1) / mr;
  int64_t mb = (g.m + g.mc - 1) / g.mc;
  const int64_t threads = parallel ? x.threads : 1;
  if (threads > 1) {
    mb = std::max(mb, std::min(2 * threads, panels / 8));
    if (mb >= threads) mb = (mb + threads - 1) / threads * threads;
  }
  mb = std::min(mb, panels);
  auto block_row = [&](int64_t ib) { return std::min(g.m, panels * ib / mb * mr); };
  const int64_t nc_max = std::min(g.nc, (g.n + nr - 1) / nr * nr);
  const int64_t kc_max = std::min(g.kc, g.k);
  Scratch bpanel(static_cast<size_t>(nc_max * kc_max) * sizeof(T));
  T* bp = static_cast<T*>(bpanel.p);
  for (int64_t jc = 0; jc < g.n; jc += g.nc) {
    const int64_t nc = std::min(g.nc, g.n - jc);
    const int64_t strips = (nc + nr - 1) / nr;
    const int64_t groups = column_groups(mb, strips, threads);
    for (int64_t pc = 0; pc < g.k; pc += g.kc) {
      const int64_t kc = std::min(g.kc, g.k - pc);
      const T* bsrc = B + pc * g.b_sk + jc * g.b_sn;
      auto pack = [&](int64_t s0, int64_t s1) {
        pack_b(bsrc, g.b_sk, g.b_sn, kc, nc, nr, bp, s0, s1);
        if (g.prepare_b) x.prepare(true, bp + s0 * kc * nr, (s1 - s0) * kc * nr);
      };
      // One run of adjacent strips per thread (pack_b reads a row's part
      // of all of them in turn).
      if (threads > 1 && strips > 1) {
        const int64_t parts = std::min(strips, threads);
        tbb::parallel_for(int64_t(0), parts, [&](int64_t p) { pack(strips * p / parts, strips * (p + 1) / parts); });
      } else {
        pack(0, strips);
      }
      const int64_t flags = (pc > 0 ? jit::llvm_cpu::kGemmAddPartial : 0) | (pc + kc >= g.k ? jit::llvm_cpu::kGemmLast : 0);
      auto task = [&](int64_t task_index) {
        const int64_t ib = task_index / groups, gi = task_index % groups;
        const int64_t ic = block_row(ib), mcur = block_row(ib + 1) - ic;
        const int64_t s0 = strips * gi / groups, s1 = strips * (gi + 1) / groups;
        if (s0 >= s1) return;
        Scratch ablock(static_cast<size_t>((mcur + mr - 1) / mr * mr * kc) * sizeof(T));
        T* ap = static_cast<T*>(ablock.p);
        pack_a(A + ic * g.a_sm + pc * g.a_sk, g.a_sm, g.a_sk, mcur, kc, mr, ap);
        if (g.prepare_a) x.prepare(false, ap, (mcur + mr - 1) / mr * mr * kc);
        GemmTile t{};
        t.kc = kc, t.b_ks = nr, t.batch = bi, t.ldp = ldp, t.flags = flags;
        // Strips in groups of g.strip_group; each A panel meets a group's
        // strips in turn, so its tiles' epilogue runs along the rows of C.
        for (int64_t sb = s0; sb < s1; sb += g.strip_group)
          for (int64_t i = 0; i < mcur; i += mr)
            for (int64_t s = sb; s < std::min(s1, sb + g.strip_group); ++s) {
              const int64_t j = s * nr;
              t.b = bp + s * kc * nr, t.j = jc + j, t.cols = std::min(nr, nc - j);
              t.a = ap + i * kc, t.i = ic + i, t.rows = std::min(mr, mcur - i);
              t.partial = part ? part + (ic + i) * ldp + jc + j : nullptr;
              x.call(t);
            }
      };
      const int64_t tasks = mb * groups;
      if (threads > 1 && tasks > 1)
        tbb::parallel_for(int64_t(0), tasks, task);
      else
        for (int64_t ti = 0; ti < tasks; ++ti) task(ti);
    }
  }
}

template <class T>
void run_packed(const Ctx& x) {
  const GemmPlan& g = x.g;
  // Partial sums of earlier K blocks: in the output, unless the output is
  // not of the accumulation dtype or shares memory with a buffer the kernel
  // reads (a donated input); then in a scratch of the product's size.
  bool in_out = g.out_buf >= 0;
  if (g.out_buf >= 0) {
    const char* o = static_cast<const char*>(x.bufs[g.out_buf]);
    for (auto [b, bytes] : x.g.reads) {
      const char* r = static_cast<const char*>(x.bufs[b]);
      if (r < o + g.out_bytes && o < r + bytes) in_out = false;
    }
  }
  const bool need_scratch = !in_out && g.k > g.kc;
  Scratch scratch(need_scratch ? static_cast<size_t>(g.batch * g.m * g.n) * sizeof(T) : 0);
  T* sp = need_scratch ? static_cast<T*>(scratch.p) : nullptr;
  const double each = static_cast<double>(g.m) * g.n * g.k;
  if (g.batch > 1 && each < (1 << 21)) {  // many small products: one per task
    tbb::parallel_for(int64_t(0), g.batch, [&](int64_t bi) { run_packed_one<T>(x, bi, false, sp); });
    return;
  }
  for (int64_t bi = 0; bi < g.batch; ++bi) run_packed_one<T>(x, bi, each >= (1 << 18), sp);
}

}  // namespace

void run_gemm(const GemmPlan& g, GemmFn fn, void* const* bufs, const double* fs, const int64_t* is,
              jit::llvm_cpu::KernelError& error) {
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  std::mutex err_mu;
  Ctx x{g, fn, bufs, fs, is, error, err_mu, tbb::this_task_arena::max_concurrency()};
  const bool dbl = g.dtype == kDouble;
  if (g.direct)
    dbl ? run_direct<double>(x) : run_direct<float>(x);
  else
    dbl ? run_packed<double>(x) : run_packed<float>(x);
}

}  // namespace loom::runtime::cpu
