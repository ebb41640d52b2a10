// Data movement: strided reads and writes (views), cat, gathers and
// scatters, and the matrix product.
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "runtime/reference/eval.h"

namespace loom::runtime::reference {

namespace {

// Offsets of a strided view (sizes, strides, offset) in row-major order.
std::vector<int64_t> strided_offsets(const ir::Dims& sizes, const int64_t* strides, int64_t offset) {
  const int nd = sizes.n;
  const int64_t n = sizes.numel();
  std::vector<int64_t> offs(n);
  std::array<int64_t, ir::kMaxDims> idx{};
  int64_t off = offset;
  for (int64_t i = 0; i < n; ++i) {
    offs[i] = off;
    for (int d = nd - 1; d >= 0; --d) {
      off += strides[d];
      if (++idx[d] < sizes[d]) break;
      off -= strides[d] * sizes[d];
      idx[d] = 0;
    }
  }
  return offs;
}

// A view node's offset: its last attribute, or its runtime scalar (ir/node.h).
int64_t view_offset(const EvalContext& c, int rank) { return c.scalars.empty() ? c.step.attr[rank] : c.scalars[0].i; }

int64_t prod(const ir::Dims& s, int from, int to) {
  int64_t p = 1;
  for (int d = from; d < to; ++d) p *= s[d];
  return p;
}

// An index element (the api gives int64 indices). Negative values are out
// of range, as in PyTorch's index_select/gather/scatter_add: wrapping them
// would turn one_hot(-1) into the last class instead of an error.
int64_t checked_index(const EvalContext& c, int64_t v, int64_t size) {
  if (v < 0 || v >= size)
    c.fail(index_out_of_range_message(v, size));
  return v;
}

// ScatterReduce's fold of v into the target's value o (ir::ScatterKind).
// Integers multiply in their unsigned type: wrap-around without undefined
// behaviour, as the CPU kernel does.
template <class T>
T scatter_fold(ir::ScatterKind k, T o, T v) {
  using K = ir::ScatterKind;
  if constexpr (std::is_same_v<T, bool>) {
    return k == K::Assign ? v : k == K::Max ? (o || v) : (o && v);
  } else if constexpr (is_real_v<T>) {
    const double a = static_cast<double>(o), b = static_cast<double>(v);
    switch (k) {
      case K::Assign: return v;
      case K::Multiply: return static_cast<T>(static_cast<T>(a * b));
      case K::Max: return (b != b || b > a) ? v : o;  // NaN in o stays: b > NaN is false
      case K::Min: return (b != b || b < a) ? v : o;
    }
  } else {
    using U = std::make_unsigned_t<T>;
    switch (k) {
      case K::Assign: return v;
      case K::Multiply: return static_cast<T>(static_cast<U>(static_cast<U>(o) * static_cast<U>(v)));
      case K::Max: return v > o ? v : o;
      case K::Min: return v < o ? v : o;
    }
  }
  throw std::logic_error("reference: unknown scatter kind");
}

void matmul(const EvalContext& c) {
  const ir::Dims& as = *c.in[0]->shape;
  const ir::Dims& bs = *c.in[1]->shape;
  // [B,M,K] x [B,K,N], or [M,K] x [K,N] (B = 1)
  const bool batched = as.n == 3;
  const int64_t B = batched ? as[0] : 1, M = as[as.n - 2], K = as[as.n - 1], N = bs[bs.n - 1];
  dispatch_dtype(c.step.dtype, [&]<class T>() {
    using A = std::conditional_t<is_real_v<T>, double, std::conditional_t<std::is_same_v<T, bool>, bool, T>>;
    const T* a = c.in[0]->as<T>();
    const T* b = c.in[1]->as<T>();
    T* out = static_cast<T*>(c.out);
    std::vector<A> row(N);
    for (int64_t bi = 0; bi < B; ++bi)
      for (int64_t i = 0; i < M; ++i) {
        std::fill(row.begin(), row.end(), A(0));
        const T* arow = a + (bi * M + i) * K;
        for (int64_t k = 0; k < K; ++k) {
          const A av = static_cast<A>(arow[k]);
          const T* brow = b + (bi * K + k) * N;
          for (int64_t j = 0; j < N; ++j) {
            if constexpr (std::is_same_v<A, bool>) row[j] = row[j] || (av && brow[j]);
            else row[j] += av * static_cast<A>(brow[j]);
          }
        }
        for (int64_t j = 0; j < N; ++j) out[(bi * M + i) * N + j] = static_cast<T>(row[j]);
      }
  });
}

}  // namespace

void eval_move(const EvalContext& c) {
  using ir::Op;
  const Step& s = c.step;
  const size_t esize = element_size(s.dtype);
  auto* out = static_cast<char*>(c.out);
  switch (s.op) {
    case Op::AsStrided: {
      const int nd = s.shape.n;
      auto offs = strided_offsets(s.shape, s.attr.data(), view_offset(c, nd));
      const auto* in = static_cast<const char*>(c.in[0]->data);
      for (size_t i = 0; i < offs.size(); ++i) std::memcpy(out + i * esize, in + offs[i] * esize, esize);
      return;
    }
    case Op::ToDevice: {
      std::memcpy(out, c.in[0]->data, s.shape.numel() * esize);
      return;
    }
    case Op::ScatterStrided: {
      const Value& base = *c.in[0];
      const Value& value = *c.in[1];
      std::memcpy(out, base.data, base.numel() * esize);
      const int nd = value.shape->n;
      auto offs = strided_offsets(*value.shape, s.attr.data(), view_offset(c, nd));
      const auto* v = static_cast<const char*>(value.data);
      for (size_t i = 0; i < offs.size(); ++i) std::memcpy(out + offs[i] * esize, v + i * esize, esize);
      return;
    }
    case Op::Concat: {
      const int dim = static_cast<int>(s.attr[0]);
      const int64_t outer = prod(s.shape, 0, dim), inner = prod(s.shape, dim + 1, s.shape.n);
      const int64_t out_row = s.shape[dim] * inner * esize;
      int64_t col = 0;
      for (const Value* in : c.in) {
        const int64_t row = (*in->shape)[dim] * inner * esize;
        const auto* src = static_cast<const char*>(in->data);
        for (int64_t o = 0; o < outer; ++o) std::memcpy(out + o * out_row + col, src + o * row, row);
        col += row;
      }
      return;
    }
    case Op::IndexSelect: {
      const int dim = static_cast<int>(s.attr[0]);
      const ir::Dims& xs = *c.in[0]->shape;
      const int64_t outer = prod(xs, 0, dim), inner = prod(xs, dim + 1, xs.n) * esize;
      const int64_t nidx = c.in[1]->numel();
      const int64_t* idx = c.in[1]->as<int64_t>();
      const auto* src = static_cast<const char*>(c.in[0]->data);
      for (int64_t j = 0; j < nidx; ++j) checked_index(c, idx[j], xs[dim]);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < nidx; ++j) {
          std::memcpy(out + (o * nidx + j) * inner, src + (o * xs[dim] + idx[j]) * inner, inner);
        }
      return;
    }
    case Op::Gather:
    case Op::ScatterAdd:
    case Op::ScatterReduce: {
      const int dim = static_cast<int>(s.attr[0]);
      const bool scatter = s.op != Op::Gather;
      const auto kind = s.op == Op::ScatterReduce ? static_cast<ir::ScatterKind>(s.attr[1]) : ir::ScatterKind::Assign;
      if (s.op == Op::ScatterReduce && (s.attr.n < 2 || s.attr[1] < 0 || s.attr[1] > 3)) c.fail("unknown scatter kind");
      const ir::Dims& xs = *c.in[0]->shape;
      const ir::Dims& is = *c.in[1]->shape;
      const ir::Dims xstr = contiguous_strides(xs);
      const int64_t* idx = c.in[1]->as<int64_t>();
      const int64_t n = is.numel();
      if (scatter) std::memcpy(out, c.in[0]->data, xs.numel() * esize);
      const ir::Dims src_str = scatter ? contiguous_strides(*c.in[2]->shape) : ir::Dims{};
      dispatch_dtype(s.dtype, [&]<class T>() {
        const T* x = c.in[0]->as<T>();
        T* o = reinterpret_cast<T*>(out);
        const T* src = scatter ? c.in[2]->as<T>() : nullptr;
        std::array<int64_t, ir::kMaxDims> coord{};
        for (int64_t i = 0; i < n; ++i) {
          int64_t xoff = 0, soff = 0;
          for (int d = 0; d < is.n; ++d) {
            int64_t cd = d == dim ? checked_index(c, idx[i], xs[dim]) : coord[d];
            xoff += cd * xstr[d];
            if (src) soff += coord[d] * src_str[d];
          }
          if (s.op == Op::Gather) {
            o[i] = x[xoff];
          } else if (s.op == Op::ScatterReduce) {
            o[xoff] = scatter_fold(kind, o[xoff], src[soff]);
          } else if constexpr (std::is_same_v<T, bool>) {
            o[xoff] = o[xoff] || src[soff];
          } else {
            o[xoff] = static_cast<T>(o[xoff] + src[soff]);
          }
          for (int d = is.n - 1; d >= 0; --d) {
            if (++coord[d] < is[d]) break;
            coord[d] = 0;
          }
        }
      });
      return;
    }
    case Op::MatMul: matmul(c); return;
    case Op::ArgSort: eval_argsort(c); return;
    case Op::Scan: eval_scan(c); return;
    case Op::Attention: case Op::AttentionGradQ: case Op::AttentionGradKV: eval_attention(c); return;
    case Op::Conv2d: case Op::Conv2dGradInput: case Op::Conv2dGradWeight: eval_conv(c); return;
    default: c.fail("not a data-movement op the reference backend knows");
  }
}

}  // namespace loom::runtime::reference
