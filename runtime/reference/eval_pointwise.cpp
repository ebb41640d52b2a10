// Elementwise ops: the scalar semantics of every Unary, Binary and Ternary
// op, in the node's dtype (float32 math in float, as a float32 kernel does).
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/reference/eval.h"

namespace loom::runtime::reference {

namespace {

template <class T>
T unary_value(ir::Op op, T x) {
  using ir::Op;
  if constexpr (std::is_same_v<T, BFloat16>) {
    return T(unary_value<float>(op, static_cast<float>(x)));
  } else if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case Op::Neg: return -x;
      case Op::Abs: return std::abs(x);
      case Op::Exp: return std::exp(x);
      case Op::Log: return std::log(x);
      case Op::Log1p: return std::log1p(x);
      case Op::Expm1: return std::expm1(x);
      case Op::Sqrt: return std::sqrt(x);
      case Op::Rsqrt: return T(1) / std::sqrt(x);
      case Op::Sin: return std::sin(x);
      case Op::Cos: return std::cos(x);
      case Op::Tanh: return std::tanh(x);
      case Op::Sigmoid: return T(1) / (T(1) + std::exp(-x));
      case Op::Relu: return x > T(0) ? x : (std::isnan(x) ? x : T(0));
      case Op::Gelu: return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
      case Op::GeluTanh: {
        const T k = T(0.79788456080286535588);  // sqrt(2/pi)
        return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
      }
      case Op::Silu: return x / (T(1) + std::exp(-x));
      case Op::Erf: return std::erf(x);
      case Op::Floor: return std::floor(x);
      case Op::Ceil: return std::ceil(x);
      case Op::Round: return std::nearbyint(x);  // half to even
      case Op::Sign: return static_cast<T>((T(0) < x) - (x < T(0)));
      case Op::Reciprocal: return T(1) / x;
      default: break;
    }
  } else if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case Op::LogicalNot: return !x;
      case Op::Abs: case Op::Relu: case Op::Floor: case Op::Ceil: case Op::Round: case Op::Sign: return x;
      default: break;
    }
  } else {
    switch (op) {
      case Op::Neg: return static_cast<T>(-x);
      case Op::Abs: return x < 0 ? static_cast<T>(-x) : x;
      case Op::Relu: return x > 0 ? x : T(0);
      case Op::Floor: case Op::Ceil: case Op::Round: return x;
      case Op::Sign: return static_cast<T>((T(0) < x) - (x < T(0)));
      default: break;
    }
  }
  return x;  // unreachable for graphs the api records; eval_unary checks first
}

bool unary_supported(ir::Op op, ScalarType t) {
  using ir::Op;
  if (is_floating_point(t)) return op != Op::LogicalNot;
  if (t == kBool)
    return op == Op::LogicalNot || op == Op::Abs || op == Op::Relu || op == Op::Floor || op == Op::Ceil ||
           op == Op::Round || op == Op::Sign;
  return op == Op::Neg || op == Op::Abs || op == Op::Relu || op == Op::Floor || op == Op::Ceil ||
         op == Op::Round || op == Op::Sign;
}

template <class T>
T int_pow(T base, T exp) {
  T result = 1;
  while (exp > 0) {
    if (exp & 1) result = static_cast<T>(result * base);
    base = static_cast<T>(base * base);
    exp >>= 1;
  }
  return result;
}

// Binary ops whose result has the inputs' dtype.
template <class T>
T arith_value(const EvalContext& c, ir::Op op, T a, T b) {
  using ir::Op;
  if constexpr (std::is_same_v<T, BFloat16>) {
    return T(arith_value<float>(c, op, static_cast<float>(a), static_cast<float>(b)));
  } else if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case Op::Add: case Op::Maximum: case Op::LogicalOr: return a || b;
      case Op::Mul: case Op::Minimum: case Op::LogicalAnd: return a && b;
      default: c.fail("not defined for bool tensors");
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case Op::Add: return a + b;
      case Op::Sub: return a - b;
      case Op::Mul: return a * b;
      case Op::Div: return a / b;
      case Op::Pow: return std::pow(a, b);
      case Op::Maximum: return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<T>::quiet_NaN() : (a > b ? a : b);
      case Op::Minimum: return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<T>::quiet_NaN() : (a < b ? a : b);
      case Op::Fmod: return std::fmod(a, b);
      case Op::Remainder: {
        T m = std::fmod(a, b);
        if (m != T(0) && ((b < T(0)) != (m < T(0)))) m += b;
        return m;
      }
      default: c.fail("not defined for floating-point tensors");
    }
  } else {
    using U = std::make_unsigned_t<T>;  // wrap-around arithmetic without UB
    switch (op) {
      case Op::Add: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case Op::Sub: return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
      case Op::Mul: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case Op::Pow:
        // A tensor of negative exponents is allowed (the api refuses a scalar
        // one): 1 and -1 keep their magnitude, anything else truncates to 0.
        if (b < 0) return a == 1 ? T(1) : a == -1 ? T((b & 1) ? -1 : 1) : T(0);
        return int_pow(a, b);
      case Op::Maximum: return a > b ? a : b;
      case Op::Minimum: return a < b ? a : b;
      case Op::IndexCheck:
        if (a < 0 || a >= b)
          c.fail(index_out_of_range_message(a, b));
        return a;
      case Op::Fmod:
      case Op::Remainder: {
        if (b == 0) c.fail("ZeroDivisionError: integer division by zero");
        if (b == -1) return 0;  // avoids INT_MIN % -1
        T m = a % b;
        if (op == Op::Remainder && m != 0 && ((b < 0) != (m < 0))) m += b;
        return m;
      }
      default: c.fail("not defined for integer tensors");
    }
  }
}

template <class T>
bool compare_value(ir::Op op, T a, T b) {
  using ir::Op;
  switch (op) {
    case Op::Eq: return a == b;
    case Op::Ne: return a != b;
    case Op::Lt: return a < b;
    case Op::Le: return a <= b;
    case Op::Gt: return a > b;
    case Op::Ge: return a >= b;
    default: return false;
  }
}

bool is_comparison(ir::Op op) {
  using ir::Op;
  return op == Op::Eq || op == Op::Ne || op == Op::Lt || op == Op::Le || op == Op::Gt || op == Op::Ge;
}

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
  const Step& s = c.step;
  const int64_t n = s.shape.numel();
  const Value& x = *c.in[0];
  if (s.op == ir::Op::Cast) {
    dispatch_dtype(x.dtype, [&]<class In>() {
      dispatch_dtype(s.dtype, [&]<class Out>() {
        const In* in = x.as<In>();
        Out* out = static_cast<Out*>(c.out);
        for (int64_t i = 0; i < n; ++i) {
          if constexpr (std::is_same_v<Out, bool>) out[i] = in[i] != In(0);
          else out[i] = static_cast<Out>(in[i]);
        }
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
        out[i] = arith_value<T>(c, ir::Op::Minimum, arith_value<T>(c, ir::Op::Maximum, in[i], lo), hi);
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
        for (int64_t i = 0; i < n; ++i) out[i] = arith_value<T>(c, s.op, a[i], b);
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
      for_each_broadcast(c, [&](int64_t i, int64_t ia, int64_t ib, int64_t) { out[i] = arith_value<T>(c, s.op, a[ia], b[ib]); });
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
