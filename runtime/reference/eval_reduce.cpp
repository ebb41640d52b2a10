// Reductions over the dims in attr[0] (a bit mask). The output keeps the
// reduced dims as size 1. Floating sums and products accumulate in double.
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/reference/eval.h"

namespace loom::runtime::reference {

namespace {

// Visits every input element in row-major order with the offset of the
// output element it reduces into and its coordinate along `track_dim`.
template <class F>
void for_each_reduced(const ir::Dims& in_shape, uint64_t mask, int track_dim, F&& f) {
  const int nd = in_shape.n;
  ir::Dims out_shape = in_shape;
  for (int d = 0; d < nd; ++d)
    if (mask >> d & 1) out_shape[d] = 1;
  ir::Dims out_strides = contiguous_strides(out_shape);
  for (int d = 0; d < nd; ++d)
    if (mask >> d & 1) out_strides[d] = 0;
  const int64_t n = in_shape.numel();
  std::array<int64_t, ir::kMaxDims> idx{};
  int64_t out_off = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, out_off, track_dim >= 0 ? idx[track_dim] : 0);
    for (int d = nd - 1; d >= 0; --d) {
      out_off += out_strides[d];
      if (++idx[d] < in_shape[d]) break;
      out_off -= out_strides[d] * in_shape[d];
      idx[d] = 0;
    }
  }
}

template <class T>
using Acc = std::conditional_t<is_real_v<T>, double, std::conditional_t<std::is_same_v<T, bool>, int64_t, T>>;

}  // namespace

void eval_reduce(const EvalContext& c) {
  using ir::Op;
  const Step& s = c.step;
  const Value& x = *c.in[0];
  const uint64_t mask = static_cast<uint64_t>(s.attr[0]);
  const int64_t m = s.shape.numel();
  int track = -1;
  if (s.op == Op::ArgMax || s.op == Op::ArgMin)
    for (int d = 0; d < x.shape->n; ++d)
      if (mask >> d & 1) track = d;

  dispatch_dtype(x.dtype, [&]<class T>() {
    const T* in = x.as<T>();
    switch (s.op) {
      case Op::Sum:
      case Op::Prod: {
        if constexpr (!std::is_same_v<T, bool>) {
          using A = Acc<T>;
          std::vector<A> acc(m, s.op == Op::Sum ? A(0) : A(1));
          using U = std::make_unsigned_t<std::conditional_t<std::is_integral_v<A>, A, int64_t>>;
          for_each_reduced(*x.shape, mask, -1, [&](int64_t i, int64_t o, int64_t) {
            if constexpr (std::is_integral_v<A>)  // wrap-around, no UB
              acc[o] = static_cast<A>(s.op == Op::Sum ? static_cast<U>(acc[o]) + static_cast<U>(in[i])
                                                      : static_cast<U>(acc[o]) * static_cast<U>(in[i]));
            else
              acc[o] = s.op == Op::Sum ? acc[o] + in[i] : acc[o] * in[i];
          });
          T* out = static_cast<T*>(c.out);
          for (int64_t k = 0; k < m; ++k) out[k] = static_cast<T>(acc[k]);
        } else {
          c.fail("sum/prod of bool reached the backend");
        }
        break;
      }
      case Op::Max:
      case Op::Min: {
        const bool is_max = s.op == Op::Max;
        T* out = static_cast<T*>(c.out);
        std::vector<uint8_t> seen(m, 0);
        for_each_reduced(*x.shape, mask, -1, [&](int64_t i, int64_t o, int64_t) {
          T v = in[i];
          if (!seen[o]) { out[o] = v; seen[o] = 1; return; }
          if constexpr (is_real_v<T>) {
            if (std::isnan(static_cast<double>(out[o]))) return;
            if (std::isnan(static_cast<double>(v))) { out[o] = v; return; }
          }
          if (is_max ? v > out[o] : v < out[o]) out[o] = v;
        });
        break;
      }
      case Op::ArgMax:
      case Op::ArgMin: {
        const bool is_max = s.op == Op::ArgMax;
        int64_t* out = static_cast<int64_t*>(c.out);
        std::vector<T> best(m);
        std::vector<uint8_t> seen(m, 0);
        for_each_reduced(*x.shape, mask, track, [&](int64_t i, int64_t o, int64_t coord) {
          T v = in[i];
          if (!seen[o]) { best[o] = v; out[o] = coord; seen[o] = 1; return; }
          if constexpr (is_real_v<T>) {
            if (std::isnan(static_cast<double>(best[o]))) return;  // the first NaN wins, as in PyTorch
            if (std::isnan(static_cast<double>(v))) { best[o] = v; out[o] = coord; return; }
          }
          if (is_max ? v > best[o] : v < best[o]) { best[o] = v; out[o] = coord; }
        });
        break;
      }
      case Op::All:
      case Op::Any: {
        bool* out = static_cast<bool*>(c.out);
        const bool all = s.op == Op::All;
        for (int64_t k = 0; k < m; ++k) out[k] = all;
        for_each_reduced(*x.shape, mask, -1, [&](int64_t i, int64_t o, int64_t) {
          bool v = in[i] != T(0);
          out[o] = all ? (out[o] && v) : (out[o] || v);
        });
        break;
      }
      default: c.fail("not a reduction the reference backend knows");
    }
  });
}

}  // namespace loom::runtime::reference
