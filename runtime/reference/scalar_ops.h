// The scalar semantics of every elementwise op (ir/ops.def's Unary,
// Binary and Ternary families) in each dtype: the one place that says what
// an op computes, element by element. The reference backend evaluates its
// nodes with these (eval_pointwise.cpp), the example interpreter its
// kernels' expressions (runtime/interp). Float32 math in float, as a
// float32 kernel computes it; bfloat16 and float16 through float, rounded
// per op.
#pragma once
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include <loom/bfloat16.h>
#include <loom/dtype.h>
#include <loom/error.h>
#include <loom/half.h>

#include "ir/dtype_dispatch.h"
#include "ir/node.h"
#include "runtime/backend.h"

namespace loom::runtime::reference {

// A runtime scalar as a value of T (a Full leaf's fill value, a Binary
// node's scalar operand).
template <class T>
T from_scalar(const ir::RtScalar& s) {
  if constexpr (std::is_same_v<T, bool>) return s.f != 0.0 || s.i != 0;
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(s.i);
  else return static_cast<T>(s.f);
}

// x converted to Out, as the Cast op does. A floating value becoming one of
// the narrow integers (uint8, int8, int16) is truncated toward zero to
// int64 and wrapped to Out's width, as PyTorch's CPU kernels give (-1.0 as
// uint8 is 255, 300.0 is 44); int32 and int64 take the value truncated
// toward zero. A value beyond int64 (or NaN) has no defined result, as in
// PyTorch.
template <class Out, class In>
Out cast_value(In x) {
  if constexpr (std::is_same_v<Out, bool>) return x != In(0);
  else if constexpr (std::is_integral_v<Out> && sizeof(Out) < 4 && !std::is_integral_v<In>)
    return static_cast<Out>(static_cast<int64_t>(static_cast<double>(x)));
  else return static_cast<Out>(x);
}

// An op with no case below: an op added to ir/ops.def but not here must
// fail where it runs, never compute something else.
[[noreturn]] inline void no_semantics(ir::Op op) {
  throw Error(std::string("loom: reference: no semantics for ") + ir::op_name(op) +
              " (runtime/reference/eval_pointwise.cpp has no case for it)");
}

template <class T>
T unary_value(ir::Op op, T x) {
  using ir::Op;
  if constexpr (ir::is_reduced_float_v<T>) {
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
      case Op::Atan: return std::atan(x);
      case Op::Asin: return std::asin(x);
      case Op::Acos: return std::acos(x);
      case Op::Floor: return std::floor(x);
      case Op::Ceil: return std::ceil(x);
      case Op::Round: return std::nearbyint(x);  // half to even
      case Op::Trunc: return std::trunc(x);
      case Op::Sign: return static_cast<T>((T(0) < x) - (x < T(0)));
      case Op::Reciprocal: return T(1) / x;
      default: break;
    }
  } else if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case Op::LogicalNot: return !x;
      case Op::Abs: case Op::Relu: case Op::Floor: case Op::Ceil: case Op::Round: case Op::Trunc: case Op::Sign: return x;
      default: break;
    }
  } else {
    switch (op) {
      case Op::Neg: return static_cast<T>(-x);
      case Op::Abs: return x < 0 ? static_cast<T>(-x) : x;
      case Op::Relu: return x > 0 ? x : T(0);
      case Op::Floor: case Op::Ceil: case Op::Round: case Op::Trunc: return x;
      case Op::Sign: return static_cast<T>((T(0) < x) - (x < T(0)));
      default: break;
    }
  }
  no_semantics(op);
}

inline bool unary_supported(ir::Op op, ScalarType t) {
  using ir::Op;
  if (is_floating_point(t)) return op != Op::LogicalNot;
  if (t == kBool)
    return op == Op::LogicalNot || op == Op::Abs || op == Op::Relu || op == Op::Floor || op == Op::Ceil ||
           op == Op::Round || op == Op::Trunc || op == Op::Sign;
  return op == Op::Neg || op == Op::Abs || op == Op::Relu || op == Op::Floor || op == Op::Ceil ||
         op == Op::Round || op == Op::Trunc || op == Op::Sign;
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

// Binary ops whose result has the inputs' dtype. `fail(message)` reports
// bad data (an index out of range, an integer division by zero) and does
// not return.
template <class T, class Fail>
T arith_value(Fail&& fail, ir::Op op, T a, T b) {
  using ir::Op;
  if constexpr (ir::is_reduced_float_v<T>) {
    return T(arith_value<float>(fail, op, static_cast<float>(a), static_cast<float>(b)));
  } else if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case Op::Add: case Op::Maximum: case Op::LogicalOr: return a || b;
      case Op::Mul: case Op::Minimum: case Op::LogicalAnd: return a && b;
      default: fail("not defined for bool tensors");
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case Op::Add: return a + b;
      case Op::Sub: return a - b;
      case Op::Mul: return a * b;
      case Op::Div: return a / b;
      case Op::Pow: return std::pow(a, b);
      case Op::Atan2: return std::atan2(a, b);
      case Op::Maximum: return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<T>::quiet_NaN() : (a > b ? a : b);
      case Op::Minimum: return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<T>::quiet_NaN() : (a < b ? a : b);
      case Op::Fmod: return std::fmod(a, b);
      case Op::Remainder: {
        T m = std::fmod(a, b);
        if (m != T(0) && ((b < T(0)) != (m < T(0)))) m += b;
        return m;
      }
      default: fail("not defined for floating-point tensors");
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
          fail(index_out_of_range_message(a, b));
        return a;
      case Op::Fmod:
      case Op::Remainder: {
        if (b == 0) fail("ZeroDivisionError: integer division by zero");
        if (b == -1) return 0;  // avoids INT_MIN % -1
        T m = a % b;
        if (op == Op::Remainder && m != 0 && ((b < 0) != (m < 0))) m += b;
        return m;
      }
      default: fail("not defined for integer tensors");
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
    default: no_semantics(op);
  }
}

inline bool is_comparison(ir::Op op) {
  using ir::Op;
  return op == Op::Eq || op == Op::Ne || op == Op::Lt || op == Op::Le || op == Op::Gt || op == Op::Ge;
}

}  // namespace loom::runtime::reference
