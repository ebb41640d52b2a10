// The library kernels other than matmul (matmul.cpp): data movement,
// sorting, scans and leaves. Semantics follow the reference backend exactly (it is the test
// oracle); the code is independent of it and splits large work across cores.
#include "kernels/cpu/library.h"

#include <tbb/blocked_range.h>
#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "ir/dtype_dispatch.h"
#include "ir/philox.h"

namespace loom::kernels::cpu {

namespace {

// Below this many element-operations a kernel stays on the calling thread:
// splitting costs more than it saves.
constexpr int64_t kParallelWork = 1 << 15;

// Calls f(begin, end) over [0, n), split across cores when n items of
// `cost` element-operations each are worth it.
template <class F>
void for_chunks(int64_t n, int64_t cost, F&& f) {
  if (n <= 0) return;
  cost = std::max<int64_t>(cost, 1);
  if (n * cost < kParallelWork || n == 1) {
    f(int64_t(0), n);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, (kParallelWork / 4) / cost);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { f(r.begin(), r.end()); });
}

void copy_bytes(void* dst, const void* src, int64_t bytes) {
  if (dst == src || bytes <= 0) return;  // an in-place update of the base
  constexpr int64_t chunk = 1 << 18;
  for_chunks((bytes + chunk - 1) / chunk, chunk, [&](int64_t b, int64_t e) {
    const int64_t lo = b * chunk, hi = std::min(bytes, e * chunk);
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
  });
}

// Copies one run of `bytes`; a single element is a typed move, not a call.
inline void copy_run(char* dst, const char* src, int64_t bytes) {
  switch (bytes) {
    case 1: *dst = *src; return;
    case 4: std::memcpy(dst, src, 4); return;
    case 8: std::memcpy(dst, src, 8); return;
    default: std::memcpy(dst, src, bytes);
  }
}

int64_t prod(const ir::Dims& s, int from, int to) {
  int64_t p = 1;
  for (int d = from; d < to; ++d) p *= s[d];
  return p;
}

ir::Dims row_major_strides(const ir::Dims& shape) {
  ir::Dims s;
  s.n = shape.n;
  int64_t acc = 1;
  for (int d = shape.n - 1; d >= 0; --d) {
    s[d] = acc;
    acc *= shape[d];
  }
  return s;
}

[[noreturn]] void out_of_bounds(int64_t v, int64_t size) {
  throw LibraryError{"index " + std::to_string(v) + " is out of bounds for dimension of size " + std::to_string(size)};
}

// The first (lowest flat position) bad index seen by any thread, so the
// error names the same index the reference's sequential loop stops at.
struct FirstBad {
  std::atomic<int64_t> pos{std::numeric_limits<int64_t>::max()};
  void note(int64_t p) {
    int64_t cur = pos.load(std::memory_order_relaxed);
    while (p < cur && !pos.compare_exchange_weak(cur, p, std::memory_order_relaxed)) {}
  }
  void raise_if_any(const int64_t* idx, int64_t size) const {
    const int64_t p = pos.load();
    if (p != std::numeric_limits<int64_t>::max()) out_of_bounds(idx[p], size);
  }
};

// ir::dispatch_dtype, a value that is not a dtype reported as bad data of
// this call (the executor names its node).
template <class F>
decltype(auto) with_type(ScalarType t, F&& f) {
  return ir::dispatch_dtype(t, std::forward<F>(f), [](ScalarType) { throw LibraryError{"unknown dtype"}; });
}

// Same-width unsigned type for integers, so sums wrap without undefined
// behaviour; floats stay as they are.
template <class T> struct WrapOf { using type = T; };
template <> struct WrapOf<int32_t> { using type = uint32_t; };
template <> struct WrapOf<int64_t> { using type = uint64_t; };
template <class T>
using Wrap = typename WrapOf<T>::type;

// ---------------------------------------------------------------- moves

// out = base, then value written at offset + sum(i_d * stride_d): the
// offset is the last attribute, or the call's runtime scalar (ir/node.h).
template <class E>
void scatter_strided(const View& base, const View& value, const View& out, const ir::Attrs& attr, int64_t offset) {
  copy_bytes(out.data, base.data, base.shape.numel() * sizeof(E));
  const ir::Dims& vs = value.shape;
  const int nd = vs.n;
  const int64_t n = vs.numel();
  E* o = static_cast<E*>(out.data);
  const E* v = static_cast<const E*>(value.data);
  if (n == 0) return;
  if (nd == 0) {
    o[offset] = v[0];
    return;
  }
  const int64_t inner = vs[nd - 1], stride = attr[nd - 1], rows = n / inner;
  auto run = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t off = offset, rest = r;
      for (int d = nd - 2; d >= 0; --d) {
        off += (rest % vs[d]) * attr[d];
        rest /= vs[d];
      }
      const E* src = v + r * inner;
      if (stride == 1) std::memcpy(o + off, src, inner * sizeof(E));
      else
        for (int64_t j = 0; j < inner; ++j) o[off + j * stride] = src[j];
    }
  };
  if (ir::never_overlaps(vs, attr.data())) for_chunks(rows, inner, run);
  else run(0, rows);
}

void concat(std::span<const View> inputs, const View& out, int dim, size_t esize) {
  const int64_t outer = prod(out.shape, 0, dim), inner = prod(out.shape, dim + 1, out.shape.n) * esize;
  const int64_t out_row = out.shape[dim] * inner;
  char* o = static_cast<char*>(out.data);
  if (outer == 1) {  // one block per input: split each copy instead
    int64_t col = 0;
    for (const View& in : inputs) {
      const int64_t bytes = in.shape[dim] * inner;
      copy_bytes(o + col, in.data, bytes);
      col += bytes;
    }
    return;
  }
  for_chunks(outer, out_row / static_cast<int64_t>(esize), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t col = 0;
      for (const View& in : inputs) {
        const int64_t bytes = in.shape[dim] * inner;
        copy_run(o + r * out_row + col, static_cast<const char*>(in.data) + r * bytes, bytes);
        col += bytes;
      }
    }
  });
}

void index_select(const View& x, const View& index, const View& out, int dim, size_t esize) {
  const ir::Dims& xs = x.shape;
  const int64_t size = xs[dim];
  const int64_t outer = prod(xs, 0, dim), inner = prod(xs, dim + 1, xs.n) * esize;
  const int64_t nidx = index.shape.numel();
  const int64_t* idx = static_cast<const int64_t*>(index.data);
  for (int64_t j = 0; j < nidx; ++j)
    if (idx[j] < 0 || idx[j] >= size) out_of_bounds(idx[j], size);
  const char* src = static_cast<const char*>(x.data);
  char* o = static_cast<char*>(out.data);
  for_chunks(outer * nidx, inner / static_cast<int64_t>(esize), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t oi = r / nidx, j = r % nidx;
      copy_run(o + r * inner, src + (oi * size + idx[j]) * inner, inner);
    }
  });
}

// Offsets into two tensors of a range of dims, walked in row-major order.
struct Walk {
  int nd = 0;
  int64_t size[ir::kMaxDims], sa[ir::kMaxDims], sb[ir::kMaxDims], coord[ir::kMaxDims];
  int64_t a = 0, b = 0;
  void start(int64_t flat) {
    a = b = 0;
    for (int d = nd - 1; d >= 0; --d) {
      coord[d] = flat % size[d];
      flat /= size[d];
      a += coord[d] * sa[d];
      b += coord[d] * sb[d];
    }
  }
  void next() {
    for (int d = nd - 1; d >= 0; --d) {
      a += sa[d];
      b += sb[d];
      if (++coord[d] < size[d]) return;
      a -= sa[d] * size[d];
      b -= sb[d] * size[d];
      coord[d] = 0;
    }
  }
};

// ScatterReduce's fold of v into o (ir::ScatterKind); integers multiply
// wrapping, in their unsigned type.
template <class T>
inline T fold(ir::ScatterKind k, T o, T v) {
  using K = ir::ScatterKind;
  if constexpr (std::is_same_v<T, bool>) {
    return k == K::Assign ? v : k == K::Max ? (o || v) : (o && v);
  } else if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, BFloat16>) {
    using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const F a = static_cast<F>(o), b = static_cast<F>(v);
    if (k == K::Assign) return v;
    if (k == K::Multiply) return static_cast<T>(a * b);
    if (k == K::Max) return (b != b || b > a) ? v : o;  // NaN propagates: b > NaN is false
    return (b != b || b < a) ? v : o;
  } else {
    if (k == K::Assign) return v;
    if (k == K::Multiply) return static_cast<T>(static_cast<Wrap<T>>(static_cast<Wrap<T>>(o) * static_cast<Wrap<T>>(v)));
    if (k == K::Max) return v > o ? v : o;
    return v < o ? v : o;
  }
}

// Gather: out[i] = x[i with its dim coordinate replaced by index[i]].
// ScatterAdd: out = x; out[i with dim replaced by index[i]] += src[i].
// ScatterReduce: the same with fold() in place of +=.
// The index is split into (outer, along dim, inner) = (O, L, I). Two
// elements can hit the same output only if they differ just along `dim`, so
// work is split over (outer, inner) and each fiber is walked along `dim` in
// increasing order: float sums come out in the reference's order.
template <class T>
void gather_scatter(const View& x, const View& index, const View* src, const View& out, int dim,
                    std::optional<ir::ScatterKind> reduce = std::nullopt) {
  const bool scatter = src != nullptr;
  const ir::Dims& xs = x.shape;
  const ir::Dims& is = index.shape;
  const int64_t n = is.numel();
  if (scatter) copy_bytes(out.data, x.data, xs.numel() * sizeof(T));
  const int64_t* idx = static_cast<const int64_t*>(index.data);
  const T* xp = static_cast<const T*>(x.data);
  const T* sp = scatter ? static_cast<const T*>(src->data) : nullptr;
  auto* op = static_cast<Wrap<T>*>(out.data);
  auto apply = [&](int64_t i, int64_t xo, int64_t so) {
    if (!scatter) op[i] = static_cast<Wrap<T>>(xp[xo]);
    else if (reduce) op[xo] = static_cast<Wrap<T>>(fold<T>(*reduce, static_cast<T>(op[xo]), sp[so]));
    else if constexpr (std::is_same_v<T, bool>) op[xo] = op[xo] || sp[so];
    else op[xo] = static_cast<Wrap<T>>(op[xo] + static_cast<Wrap<T>>(sp[so]));
  };
  if (n == 0) return;
  if (is.n == 0) {  // a 0-d index: the reference reads element 0, unchecked
    apply(0, 0, 0);
    return;
  }
  const ir::Dims xstr = row_major_strides(xs);
  const ir::Dims sstr = scatter ? row_major_strides(src->shape) : ir::Dims{};
  const int64_t O = prod(is, 0, dim), L = is[dim], I = prod(is, dim + 1, is.n), size = xs[dim];
  Walk pre, post;
  pre.nd = dim;
  for (int d = 0; d < dim; ++d) pre.size[d] = is[d], pre.sa[d] = xstr[d], pre.sb[d] = sstr[d];
  post.nd = is.n - dim - 1;
  for (int d = dim + 1; d < is.n; ++d)
    post.size[d - dim - 1] = is[d], post.sa[d - dim - 1] = xstr[d], post.sb[d - dim - 1] = sstr[d];
  // When x (and src) match the index after `dim`, an inner position is its
  // own offset there and the walk is skipped.
  bool flat_inner = true;
  for (int d = dim + 1; d < is.n; ++d)
    flat_inner = flat_inner && xs[d] == is[d] && (!scatter || src->shape[d] == is[d]);
  flat_inner = flat_inner || I == 1;
  FirstBad bad;
  auto body = [&](int64_t o0, int64_t o1, int64_t q0, int64_t q1) {
    Walk pw = pre, qw = post;
    pw.start(o0);
    for (int64_t o = o0; o < o1; ++o, pw.next()) {
      for (int64_t j = 0; j < L; ++j) {
        const int64_t ibase = (o * L + j) * I;
        const int64_t srow = pw.b + j * sstr[dim];
        if (!flat_inner) qw.start(q0);
        for (int64_t q = q0; q < q1; ++q) {
          const int64_t k = idx[ibase + q];
          const int64_t xq = flat_inner ? q : qw.a, sq = flat_inner ? q : qw.b;
          if (!flat_inner) qw.next();
          if (k < 0 || k >= size) {
            bad.note(ibase + q);
            continue;
          }
          apply(ibase + q, pw.a + k * xstr[dim] + xq, srow + sq);
        }
      }
    }
  };
  if (n < kParallelWork) {
    body(0, O, 0, I);
  } else {
    const int64_t qgrain = std::min<int64_t>(I, 4096);
    const int64_t ograin = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, L * qgrain));
    tbb::parallel_for(tbb::blocked_range2d<int64_t>(0, O, ograin, 0, I, qgrain),
                      [&](const tbb::blocked_range2d<int64_t>& r) {
                        body(r.rows().begin(), r.rows().end(), r.cols().begin(), r.cols().end());
                      });
  }
  bad.raise_if_any(idx, size);
}

// ---------------------------------------------------------------- sorting

// An unsigned key whose order is the values' order: NaN above +inf (every
// NaN equal), -0.0 equal to 0.0, so that sorting (key, position) pairs is a
// stable sort of the values as PyTorch compares them.
template <class T>
uint64_t sort_key(T v) {
  if constexpr (std::is_same_v<T, bool>) return v ? 1 : 0;
  else if constexpr (std::is_same_v<T, int32_t>) return static_cast<uint32_t>(v) ^ 0x80000000u;
  else if constexpr (std::is_same_v<T, int64_t>) return static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
  else {
    double d = static_cast<double>(static_cast<std::conditional_t<std::is_same_v<T, BFloat16>, float, T>>(v));
    if (d != d) return ~uint64_t{0};
    if (d == 0) d = 0;  // -0.0 ties with 0.0
    const uint64_t bits = std::bit_cast<uint64_t>(d);
    return bits >> 63 ? ~bits : bits | (uint64_t{1} << 63);
  }
}

// ArgSort: each row along `dim` (stride `inner` in x) sorted as (key,
// position) pairs, so equal values keep their order; descending flips the
// key, which puts NaN first.
template <class T>
void argsort(const View& x, const View& out, int dim, bool descending) {
  const ir::Dims& xs = x.shape;
  const int64_t len = xs[dim], inner = prod(xs, dim + 1, xs.n), rows = prod(xs, 0, dim) * inner;
  const T* xp = static_cast<const T*>(x.data);
  auto* op = static_cast<int64_t*>(out.data);
  const uint64_t flip = descending ? ~uint64_t{0} : 0;
  int64_t log_len = 1;
  while ((int64_t{1} << log_len) < len) ++log_len;
  for_chunks(rows, len * log_len, [&](int64_t r0, int64_t r1) {
    std::vector<std::pair<uint64_t, int64_t>> pairs(static_cast<size_t>(len));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t base = r / inner * len * inner + r % inner;
      for (int64_t k = 0; k < len; ++k) pairs[static_cast<size_t>(k)] = {sort_key(xp[base + k * inner]) ^ flip, k};
      std::sort(pairs.begin(), pairs.end());
      for (int64_t k = 0; k < len; ++k) op[base + k * inner] = pairs[static_cast<size_t>(k)].second;
    }
  });
}

// ---------------------------------------------------------------- scans

// PyTorch's CPU accumulate types: float in double, bfloat16 and float16 in
// float; integers in their unsigned type (wrap-around); bool as or / and.
template <class T> struct ScanAccOf { using type = Wrap<T>; };
template <> struct ScanAccOf<float> { using type = double; };
template <> struct ScanAccOf<BFloat16> { using type = float; };
template <> struct ScanAccOf<Half> { using type = float; };

// Scan: each row along `dim` walked in order. Sums start from 0 and
// products from 1, as PyTorch's; cummax / cummin (ArgMax / ArgMin) keep
// the last position of a tie and move to every NaN, as PyTorch's.
template <class T>
void scan(const View& x, const View& out, int dim, ir::ScanKind kind) {
  using A = typename ScanAccOf<T>::type;
  const ir::Dims& xs = x.shape;
  const int64_t len = xs[dim], inner = prod(xs, dim + 1, xs.n), rows = prod(xs, 0, dim) * inner;
  const T* xp = static_cast<const T*>(x.data);
  const bool arg = kind == ir::ScanKind::ArgMax || kind == ir::ScanKind::ArgMin;
  auto is_nan = [](T v) {
    if constexpr (std::is_same_v<T, bool> || std::is_integral_v<T>) return false;
    else return std::isnan(static_cast<double>(v));
  };
  for_chunks(rows, len, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t base = r / inner * len * inner + r % inner;
      if (arg) {
        auto* op = static_cast<int64_t*>(out.data);
        T best = xp[base];
        int64_t at = 0;
        for (int64_t k = 0; k < len; ++k) {
          const T v = xp[base + k * inner];
          const bool better = kind == ir::ScanKind::ArgMax ? !(v < best) : !(best < v);
          if (is_nan(v) || (!is_nan(best) && better)) best = v, at = k;
          op[base + k * inner] = at;
        }
        continue;
      }
      T* op = static_cast<T*>(out.data);
      A acc = kind == ir::ScanKind::Sum ? A(0) : A(1);
      for (int64_t k = 0; k < len; ++k) {
        const A v = static_cast<A>(xp[base + k * inner]);
        if constexpr (std::is_same_v<T, bool>) acc = kind == ir::ScanKind::Sum ? (acc || v) : (acc && v);
        else acc = kind == ir::ScanKind::Sum ? static_cast<A>(acc + v) : static_cast<A>(acc * v);
        op[base + k * inner] = static_cast<T>(acc);
      }
    }
  });
}

// ---------------------------------------------------------------- leaves

template <class T>
T from_scalar(const ir::RtScalar& s) {
  if constexpr (std::is_same_v<T, bool>) return s.f != 0.0 || s.i != 0;
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(s.i);
  else return static_cast<T>(s.f);
}

// PyTorch's symmetric linspace: the ends converted to T first, the step in
// T for floating types and in double for integers; the first half counts up
// from start, the second half down from end, so both ends are exact.
template <class T>
void linspace(T* out, int64_t n, const ir::RtScalar& s0, const ir::RtScalar& s1) {
  using Step = std::conditional_t<std::is_integral_v<T>, double, std::conditional_t<ir::is_reduced_float_v<T>, float, T>>;
  const T start = from_scalar<T>(s0), end = from_scalar<T>(s1);
  if (n == 1) {
    out[0] = start;
    return;
  }
  const Step step = n > 1 ? (static_cast<Step>(end) - static_cast<Step>(start)) / static_cast<Step>(n - 1) : Step(0);
  const int64_t half = n / 2;
  for_chunks(n, 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      if (i < half) out[i] = static_cast<T>(start + step * static_cast<Step>(i));
      else out[i] = static_cast<T>(end - step * static_cast<Step>(n - 1 - i));
    }
  });
}

// Element i is Philox(seed, counter = offset + i): independent of how the
// range is split across threads.
template <class T>
void random(T* out, int64_t n, bool normal, uint64_t seed, uint64_t offset) {
  for_chunks(n, normal ? 64 : 32, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto ui = static_cast<uint64_t>(i);
      if (normal) {
        out[i] = static_cast<T>(ir::philox::normal(seed, offset, ui));
      } else {
        const double u = ir::philox::uniform(seed, offset, ui);
        if constexpr (std::is_same_v<T, float> || ir::is_reduced_float_v<T>) out[i] = T(ir::philox::uniform_f32(u));
        else out[i] = static_cast<T>(u);
      }
    }
  });
}

}  // namespace

void run_library(const ir::LibraryCall& call, std::span<const View> inputs, const View& out,
                 std::span<const ir::RtScalar> scalars) {
  using ir::Op;
  if ((call.op == Op::Linspace || call.op == Op::RandUniform || call.op == Op::RandNormal) && scalars.size() < 2)
    throw LibraryError{std::string(ir::op_name(call.op)) + " needs 2 runtime scalars"};
  const size_t esize = element_size(out.dtype);
  const int64_t n = out.shape.numel();
  switch (call.op) {
    case Op::MatMul: return matmul(inputs[0], inputs[1], out);
    case Op::ToDevice: return copy_bytes(out.data, inputs[0].data, n * static_cast<int64_t>(esize));
    case Op::Concat: return concat(inputs, out, static_cast<int>(call.attr[0]), esize);
    case Op::IndexSelect: return index_select(inputs[0], inputs[1], out, static_cast<int>(call.attr[0]), esize);
    case Op::ScatterStrided: {
      if (call.attr.n != inputs[1].shape.n + 1) throw LibraryError{"scatter_strided: attributes do not match the view"};
      const int64_t offset = call.num_scalars == 1 ? scalars[0].i : call.attr[call.attr.n - 1];
      switch (esize) {
        case 1: return scatter_strided<uint8_t>(inputs[0], inputs[1], out, call.attr, offset);
        case 2: return scatter_strided<uint16_t>(inputs[0], inputs[1], out, call.attr, offset);
        case 4: return scatter_strided<uint32_t>(inputs[0], inputs[1], out, call.attr, offset);
        default: return scatter_strided<uint64_t>(inputs[0], inputs[1], out, call.attr, offset);
      }
    }
    case Op::Gather:
    case Op::ScatterAdd:
      return with_type(out.dtype, [&]<class T>() {
        gather_scatter<T>(inputs[0], inputs[1], call.op == Op::ScatterAdd ? &inputs[2] : nullptr, out,
                          static_cast<int>(call.attr[0]));
      });
    case Op::ArgSort:
      if (n == 0) return;
      if (inputs[0].shape.n == 0) {  // one element: position 0
        *static_cast<int64_t*>(out.data) = 0;
        return;
      }
      return with_type(inputs[0].dtype, [&]<class T>() {
        argsort<T>(inputs[0], out, static_cast<int>(call.attr[0]), call.attr[1] != 0);
      });
    case Op::Scan:
      if (n == 0) return;
      if (call.attr[1] < 0 || call.attr[1] > 3) throw LibraryError{"scan: unknown kind"};
      return with_type(inputs[0].dtype, [&]<class T>() {
        const int64_t one = 1;  // a 0-d x is a row of one
        const View x{inputs[0].data, inputs[0].dtype, inputs[0].shape.n == 0 ? ir::Dims(&one, 1) : inputs[0].shape};
        scan<T>(x, out, static_cast<int>(call.attr[0]), static_cast<ir::ScanKind>(call.attr[1]));
      });
    case Op::Attention:
    case Op::AttentionGradQ:
    case Op::AttentionGradKV:
      if (scalars.size() < 2) throw LibraryError{std::string(ir::op_name(call.op)) + " needs its scale and window"};
      return attention(call, inputs, out, scalars[0].f, scalars[1].i);
    case Op::Conv2d:
    case Op::Conv2dGradInput:
    case Op::Conv2dGradWeight:
      return conv(call, inputs, out);
    case Op::ScatterReduce:
      if (call.attr.n < 2 || call.attr[1] < 0 || call.attr[1] > 3) throw LibraryError{"scatter_reduce: unknown kind"};
      return with_type(out.dtype, [&]<class T>() {
        gather_scatter<T>(inputs[0], inputs[1], &inputs[2], out, static_cast<int>(call.attr[0]),
                          static_cast<ir::ScatterKind>(call.attr[1]));
      });
    case Op::Linspace:
      return with_type(out.dtype, [&]<class T>() { linspace<T>(static_cast<T*>(out.data), n, scalars[0], scalars[1]); });
    case Op::RandUniform:
    case Op::RandNormal:
      return with_type(out.dtype, [&]<class T>() {
        random<T>(static_cast<T*>(out.data), n, call.op == Op::RandNormal, static_cast<uint64_t>(scalars[0].i),
                  static_cast<uint64_t>(scalars[1].i));
      });
    default:
      throw LibraryError{std::string("no library kernel for ") + ir::op_name(call.op)};
  }
}

}  // namespace loom::kernels::cpu
