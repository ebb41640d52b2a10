// Elementwise ops: the scalar semantics of every Unary, Binary and Ternary
// op, in the node's dtype (float32 math in float, as a float32 kernel does).
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/reference/eval.h"
#include "runtime/reference/scalar_ops.h"

namespace loom::runtime::reference {

namespace {

// Bad data reported as this node's RunError (scalar_ops.h's `fail`).
struct FailAt {
  const EvalContext& c;
  [[noreturn]] void operator()(const std::string& message) const { c.fail(message); }
};

// Calls f(i, ia, ib) for every output element with each input's element offset.
template <class F>
void for_each_broadcast(const EvalContext& c, F&& f) {
  const ir::Dims& out_shape = c.step.shape;
  const int64_t n = out_shape.numel();
  std::vector<std::vector<int64_t>> offsets(c.in.size());
  std::vector<bool> ident(c.in.size());
  for (size_t k = 0; k < c.in.size(); ++k) {
    BroadcastIndex bi(*c.in[k]->shape, out_shape);
    ident[k] = bi.identity();
    if (!ident[k]) bi.fill(offsets[k]);
  }
  auto at = [&](size_t k, int64_t i) { return ident[k] ? i : offsets[k][i]; };
  for (int64_t i = 0; i < n; ++i) {
    if (c.in.size() == 2) f(i, at(0, i), at(1, i), int64_t{0});
    else f(i, at(0, i), at(1, i), at(2, i));
  }
}

}  // namespace

void eval_unary(const EvalContext& c) {
  const FailAt fail{c};
  const Step& s = c.step;
  const int64_t n = s.shape.numel();
  const Value& x = *c.in[0];
  if (s.op == ir::Op::Cast) {
    dispatch_dtype(x.dtype, [&]<class In>() {
      dispatch_dtype(s.dtype, [&]<class Out>() {
        const In* in = x.as<In>();
        Out* out = static_cast<Out*>(c.out);
        for (int64_t i = 0; i < n; ++i) out[i] = cast_value<Out>(in[i]);
      });
    });
    return;
  }
  if (s.op == ir::Op::Clamp) {  // minimum(maximum(x, lo), hi), as the two binary ops compute them
    if (x.dtype != s.dtype || s.dtype == kBool || c.scalars.size() != 2)
      c.fail(std::string("not defined for dtype ") + std::string(to_string(x.dtype)));
    dispatch_dtype(s.dtype, [&]<class T>() {
      const T* in = x.as<T>();
      T* out = static_cast<T*>(c.out);
      const T lo = from_scalar<T>(c.scalars[0]), hi = from_scalar<T>(c.scalars[1]);
      for (int64_t i = 0; i < n; ++i)
        out[i] = arith_value<T>(fail, ir::Op::Minimum, arith_value<T>(fail, ir::Op::Maximum, in[i], lo), hi);
    });
    return;
  }
  if (x.dtype != s.dtype || !unary_supported(s.op, s.dtype))
    c.fail(std::string("not defined for dtype ") + std::string(to_string(x.dtype)));
  dispatch_dtype(s.dtype, [&]<class T>() {
    const T* in = x.as<T>();
    T* out = static_cast<T*>(c.out);
    for (int64_t i = 0; i < n; ++i) out[i] = unary_value<T>(s.op, in[i]);
  });
}

void eval_binary(const EvalContext& c) {
  const FailAt fail{c};
  const Step& s = c.step;
  const ScalarType t = c.in[0]->dtype;
  if (c.in.size() == 1) {  // the second operand is a runtime scalar, in the input's dtype
    if (c.scalars.size() != 1) c.fail("a binary node with one input needs one scalar operand");
    if (!(*c.in[0]->shape == s.shape)) c.fail("a binary node with a scalar operand has its input's shape");
    const int64_t n = s.shape.numel();
    dispatch_dtype(t, [&]<class T>() {
      const T* a = c.in[0]->as<T>();
      const T b = from_scalar<T>(c.scalars[0]);
      if (is_comparison(s.op)) {
        bool* out = static_cast<bool*>(c.out);
        for (int64_t i = 0; i < n; ++i) out[i] = compare_value<T>(s.op, a[i], b);
      } else {
        T* out = static_cast<T*>(c.out);
        for (int64_t i = 0; i < n; ++i) out[i] = arith_value<T>(fail, s.op, a[i], b);
      }
    });
    return;
  }
  if (c.in[1]->dtype != t) c.fail("inputs of different dtypes reached the backend");
  dispatch_dtype(t, [&]<class T>() {
    const T* a = c.in[0]->as<T>();
    const T* b = c.in[1]->as<T>();
    if (is_comparison(s.op)) {
      bool* out = static_cast<bool*>(c.out);
      for_each_broadcast(c, [&](int64_t i, int64_t ia, int64_t ib, int64_t) { out[i] = compare_value<T>(s.op, a[ia], b[ib]); });
    } else {
      T* out = static_cast<T*>(c.out);
      for_each_broadcast(c, [&](int64_t i, int64_t ia, int64_t ib, int64_t) { out[i] = arith_value<T>(fail, s.op, a[ia], b[ib]); });
    }
  });
}

void eval_where(const EvalContext& c) {
  const Step& s = c.step;
  const bool* cond = c.in[0]->as<bool>();
  dispatch_dtype(s.dtype, [&]<class T>() {
    const T* a = c.in[1]->as<T>();
    const T* b = c.in[2]->as<T>();
    T* out = static_cast<T*>(c.out);
    for_each_broadcast(c, [&](int64_t i, int64_t ic, int64_t ia, int64_t ib) { out[i] = cond[ic] ? a[ia] : b[ib]; });
  });
}

}  // namespace loom::runtime::reference
