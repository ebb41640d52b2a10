// Pointwise ops: shape rule (NumPy broadcast), dtype rule (PyTorch
// promotion), and the node each records. Their scalar semantics live in
// runtime/reference/eval_pointwise.cpp.
#include <loom/functions.h>

#include <algorithm>
#include <iterator>
#include <limits>

#include "api/src/autograd/hooks.h"
#include "api/src/autocast.h"
#include "api/src/record.h"

namespace loom {

using detail::impl_of;
using detail::new_node;
using detail::wrap;

// ---------------------------------------------------------------- promotion
namespace {
int category(ScalarType t) { return t == kBool ? 0 : is_integral(t) ? 1 : 2; }
int category(const Scalar& s) { return s.isBoolean() ? 0 : s.isIntegral() ? 1 : 2; }
// The dtype a Python-style number stands for when it wins a promotion.
ScalarType scalar_default(const Scalar& s) { return s.isBoolean() ? kBool : s.isIntegral() ? kLong : kFloat; }
}  // namespace

namespace {
// promote_types, inline: the recording path calls it on every binary op.
inline ScalarType promote(ScalarType a, ScalarType b) {
  if (a == b) return a;
  // bool < int32 < int64 < float32 < float64 are the enum's order (its
  // first five values); the later dtypes need the general rule.
  if (static_cast<uint8_t>(a) >= 5 || static_cast<uint8_t>(b) >= 5) return promote_types(a, b);
  return static_cast<uint8_t>(a) >= static_cast<uint8_t>(b) ? a : b;
}
// result_type on what the impls hold, so an op reads each operand's impl once.
inline ScalarType result_type_of(ScalarType a, bool a_zero_dim, ScalarType b, bool b_zero_dim) {
  // Tensors with dims outrank zero-dim tensors, which outrank scalars: a
  // lower-priority operand only matters if it is of a higher category.
  if (a_zero_dim == b_zero_dim) return promote(a, b);
  const ScalarType dimmed = a_zero_dim ? b : a, zero = a_zero_dim ? a : b;
  return category(zero) > category(dimmed) ? promote(dimmed, zero) : dimmed;
}
inline ScalarType result_type_of(ScalarType a, const Scalar& b) {
  return category(b) > category(a) ? promote(a, scalar_default(b)) : a;
}
}  // namespace

ScalarType result_type(const Tensor& a, const Tensor& b) {
  return result_type_of(a.dtype(), a.dim() == 0, b.dtype(), b.dim() == 0);
}

ScalarType result_type(const Tensor& a, const Scalar& b) { return result_type_of(a.dtype(), b); }

// ---------------------------------------------------------------- unary
namespace {

enum class UnaryRule {
  Float,     // integers and bool become float32 (exp, sin, ...)
  Keep,      // dtype kept; bool rejected (neg, abs, relu)
  KeepBool,  // dtype kept; bool accepted (sign)
  Integral,  // dtype kept; bool rejected; integers are their own result (floor, ceil, round, trunc)
};

// Unary ops on autocast's float32 list (api/src/autocast.cpp).
bool on_float32_list(ir::Op op) {
  static constexpr ir::Op kList[] = {ir::Op::Exp,   ir::Op::Expm1, ir::Op::Log,        ir::Op::Log1p,
                                     ir::Op::Rsqrt, ir::Op::Asin,  ir::Op::Acos, ir::Op::Reciprocal};
  return std::find(std::begin(kList), std::end(kList), op) != std::end(kList);
}

Tensor unary(ir::Op op, const char* name, const Tensor& x, UnaryRule rule, const SourceLoc& loc) {
  if (detail::autocast::wants_float(x) && on_float32_list(op)) [[unlikely]]
    return unary(op, name, x.to(kFloat, loc), rule, loc);
  const detail::TensorImpl& im = impl_of(x, name, loc);
  ScalarType dt = im.storage->dtype;
  if (rule == UnaryRule::Float && !is_floating_point(dt)) dt = kFloat;
  LOOM_CHECK(!((rule == UnaryRule::Keep || rule == UnaryRule::Integral) && dt == kBool), name, loc,
             "not supported for bool tensors (", detail::describe(x), ")");
  if (rule == UnaryRule::Integral && !is_floating_point(dt)) return x.clone(loc);  // floor of an integer is itself
  Tensor out = wrap(new_node(op, dt, im.storage->device, im.view.sizes, {detail::read_as(x, dt, loc)}, loc));
  detail::grad::on_unary(op, x, out, loc);
  return out;
}

enum class BinaryRule {
  Arith,    // promoted dtype in and out
  TrueDiv,  // promoted, then integers become float32
  Compare,  // promoted in, bool out
  Logical,  // bool in, bool out
};

Tensor binary_nodes(ir::Op op, const char* name, ir::NodePtr a, ir::NodePtr b, ScalarType dt, BinaryRule rule,
                    const ir::Dims& shape, Device dev, const SourceLoc& loc) {
  if (rule == BinaryRule::TrueDiv && !is_floating_point(dt)) dt = kFloat;
  if (rule == BinaryRule::Logical) dt = kBool;
  LOOM_CHECK(!(dt == kBool && (op == ir::Op::Pow || op == ir::Op::Fmod || op == ir::Op::Remainder)), name, loc,
             "not supported for bool tensors");
  ScalarType out = (rule == BinaryRule::Compare || rule == BinaryRule::Logical) ? kBool : dt;
  a = detail::cast_node(std::move(a), dt, loc);
  b = detail::cast_node(std::move(b), dt, loc);
  return wrap(detail::new_node2(op, out, dev, shape, std::move(a), std::move(b), loc));
}

// PyTorch refuses subtraction with any bool operand (a Python bool counts).
void check_sub(ir::Op op, bool a_bool, bool b_bool, const SourceLoc& loc) {
  LOOM_CHECK(!(op == ir::Op::Sub && (a_bool || b_bool)), "sub", loc,
             "subtraction, the `-` operator, with a bool tensor is not supported; use the `~` or logical_not() "
             "operator to invert a mask, or logical_xor()");
}

Tensor binary(ir::Op op, const char* name, const Tensor& a, const Tensor& b, BinaryRule rule, const SourceLoc& loc) {
  const detail::TensorImpl& ia = impl_of(a, name, loc);
  const detail::TensorImpl& ib = impl_of(b, name, loc);
  const ScalarType da = ia.storage->dtype, db = ib.storage->dtype;
  check_sub(op, da == kBool, db == kBool, loc);
  detail::check_same_device(a, b, name, loc);
  ir::Dims shape = detail::broadcast_shapes(ia.view.sizes, ib.view.sizes, name, loc);
  const ScalarType dt = result_type_of(da, ia.view.sizes.n == 0, db, ib.view.sizes.n == 0);
  Tensor out = binary_nodes(op, name, detail::read(a, loc), detail::read(b, loc), dt, rule, shape, ia.storage->device, loc);
  detail::grad::on_binary(op, a, b, out, loc);
  return out;
}

// tensor op scalar: the scalar is folded into the node as its second
// operand, a runtime scalar (ir/node.h, has_scalar_operand): one node, not a
// Full leaf plus the op, and the same key for any value of the scalar.
Tensor binary(ir::Op op, const char* name, const Tensor& a, const Scalar& b, BinaryRule rule, const SourceLoc& loc) {
  const detail::TensorImpl& im = impl_of(a, name, loc);
  const ScalarType a_dt = im.storage->dtype;
  check_sub(op, a_dt == kBool, b.isBoolean(), loc);
  ScalarType dt = result_type_of(a_dt, b);
  ScalarType node_dt = rule == BinaryRule::Logical ? kBool : dt;
  const Device dev = im.storage->device;
  if (rule == BinaryRule::TrueDiv && !is_floating_point(dt)) {
    // An integer scalar true-divided: it is first an integer of dt, then
    // cast to float32 with the tensor (as before folding): keep the Full leaf.
    Tensor out = binary_nodes(op, name, detail::read(a, loc), detail::scalar_node(b, node_dt, dev, loc), dt, rule,
                              detail::shape_of(a), dev, loc);
    detail::grad::on_binary(op, a, b, out, loc);
    return out;
  }
  if (rule == BinaryRule::Logical) dt = kBool;
  LOOM_CHECK(!(dt == kBool && (op == ir::Op::Pow || op == ir::Op::Fmod || op == ir::Op::Remainder)), name, loc,
             "not supported for bool tensors");
  const ScalarType out_dt = (rule == BinaryRule::Compare || rule == BinaryRule::Logical) ? kBool : dt;
  auto n = new_node(op, out_dt, dev, im.view.sizes, {detail::cast_node(detail::read(a, loc), dt, loc)}, loc);
  n->scalar[0] = detail::rt_scalar(b);
  n->num_scalars = 1;
  Tensor out = wrap(std::move(n));
  detail::grad::on_binary(op, a, b, out, loc);
  return out;
}

Tensor binary(ir::Op op, const char* name, const Scalar& a, const Tensor& b, BinaryRule rule, const SourceLoc& loc) {
  impl_of(b, name, loc);
  check_sub(op, a.isBoolean(), b.dtype() == kBool, loc);
  ScalarType dt = result_type(b, a);
  ScalarType node_dt = rule == BinaryRule::Logical ? kBool : dt;
  Tensor out = binary_nodes(op, name, detail::scalar_node(a, node_dt, b.device(), loc), detail::read(b, loc), dt, rule,
                            detail::shape_of(b), b.device(), loc);
  detail::grad::on_binary(op, a, b, out, loc);
  return out;
}

bool is_one(const Scalar& s) { return s.isFloatingPoint() ? s.toDouble() == 1.0 : s.toLong() == 1; }

void check_alpha(ScalarType dt, const Scalar& alpha, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(!(is_integral(dt, true) && alpha.isFloatingPoint()), op, loc,
             "for integral input tensors, argument alpha must not be a floating point number");
}

}  // namespace

#define LOOM_UNARY(fn, OP, RULE)                                                                       \
  Tensor fn(const Tensor& x, SourceLoc loc) { return unary(ir::Op::OP, #fn, x, UnaryRule::RULE, loc); } \
  Tensor Tensor::fn(SourceLoc loc) const { return unary(ir::Op::OP, #fn, *this, UnaryRule::RULE, loc); }
LOOM_UNARY(neg, Neg, Keep)
LOOM_UNARY(abs, Abs, Keep)
LOOM_UNARY(exp, Exp, Float)
LOOM_UNARY(log, Log, Float)
LOOM_UNARY(log1p, Log1p, Float)
LOOM_UNARY(expm1, Expm1, Float)
LOOM_UNARY(sqrt, Sqrt, Float)
LOOM_UNARY(rsqrt, Rsqrt, Float)
LOOM_UNARY(sin, Sin, Float)
LOOM_UNARY(cos, Cos, Float)
LOOM_UNARY(tanh, Tanh, Float)
LOOM_UNARY(sigmoid, Sigmoid, Float)
LOOM_UNARY(relu, Relu, Keep)
LOOM_UNARY(erf, Erf, Float)
LOOM_UNARY(atan, Atan, Float)
LOOM_UNARY(asin, Asin, Float)
LOOM_UNARY(acos, Acos, Float)
LOOM_UNARY(floor, Floor, Integral)
LOOM_UNARY(ceil, Ceil, Integral)
LOOM_UNARY(round, Round, Integral)
LOOM_UNARY(trunc, Trunc, Integral)
LOOM_UNARY(sign, Sign, KeepBool)
LOOM_UNARY(reciprocal, Reciprocal, Float)
#undef LOOM_UNARY

Tensor fix(const Tensor& x, SourceLoc loc) { return trunc(x, loc); }
Tensor arctan(const Tensor& x, SourceLoc loc) { return atan(x, loc); }
Tensor arcsin(const Tensor& x, SourceLoc loc) { return asin(x, loc); }
Tensor arccos(const Tensor& x, SourceLoc loc) { return acos(x, loc); }
Tensor arctan2(const Tensor& a, const Tensor& b, SourceLoc loc) { return atan2(a, b, loc); }
Tensor Tensor::arctan(SourceLoc loc) const { return atan(loc); }
Tensor Tensor::arcsin(SourceLoc loc) const { return asin(loc); }
Tensor Tensor::arccos(SourceLoc loc) const { return acos(loc); }
Tensor Tensor::arctan2(const Tensor& o, SourceLoc loc) const { return atan2(o, loc); }

Tensor silu(const Tensor& x, SourceLoc loc) {
  LOOM_CHECK(is_floating_point(impl_of(x, "silu", loc).storage->dtype), "silu", loc,
             "expected a floating-point tensor but got ", detail::describe(x));
  return unary(ir::Op::Silu, "silu", x, UnaryRule::Float, loc);
}
Tensor gelu(const Tensor& x, const std::string& approximate, SourceLoc loc) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh", "gelu", loc,
             "approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  LOOM_CHECK(is_floating_point(impl_of(x, "gelu", loc).storage->dtype), "gelu", loc,
             "expected a floating-point tensor but got ", detail::describe(x));
  return unary(approximate == "tanh" ? ir::Op::GeluTanh : ir::Op::Gelu, "gelu", x, UnaryRule::Float, loc);
}
// As pow(x, 2): a bool tensor squares to int64.
Tensor square(const Tensor& x, SourceLoc loc) {
  impl_of(x, "square", loc);
  if (x.dtype() == kBool) return square(x.to(kLong, loc), loc);
  return mul(x, x, loc);
}
Tensor Tensor::square(SourceLoc loc) const { return loom::square(*this, loc); }

Tensor logical_not(const Tensor& x, SourceLoc loc) {
  impl_of(x, "logical_not", loc);
  return wrap(new_node(ir::Op::LogicalNot, kBool, x.device(), detail::shape_of(x), {detail::read_as(x, kBool, loc)}, loc));
}
Tensor Tensor::logical_not(SourceLoc loc) const { return loom::logical_not(*this, loc); }

// ---------------------------------------------------------------- binary
namespace {
// a + alpha * b: alpha scales b before the promotion, as in PyTorch.
Tensor add_sub(ir::Op op, const char* name, const Tensor& a, const Tensor& b, const Scalar& alpha, const SourceLoc& loc) {
  impl_of(a, name, loc);
  impl_of(b, name, loc);
  if (is_one(alpha)) return binary(op, name, a, b, BinaryRule::Arith, loc);
  check_alpha(result_type(a, b), alpha, name, loc);
  return binary(op, name, a, mul(b, alpha, loc), BinaryRule::Arith, loc);
}
Tensor add_sub(ir::Op op, const char* name, const Tensor& a, const Scalar& b, const Scalar& alpha, const SourceLoc& loc) {
  impl_of(a, name, loc);
  if (is_one(alpha)) return binary(op, name, a, b, BinaryRule::Arith, loc);
  return add_sub(op, name, a, scalar_tensor(b, TensorOptions(result_type(a, b)).device(a.device()), loc), alpha, loc);
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha, SourceLoc loc) {
  return add_sub(ir::Op::Add, "add", a, b, alpha, loc);
}
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha, SourceLoc loc) {
  return add_sub(ir::Op::Add, "add", a, b, alpha, loc);
}
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha, SourceLoc loc) {
  return add_sub(ir::Op::Sub, "sub", a, b, alpha, loc);
}
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha, SourceLoc loc) {
  return add_sub(ir::Op::Sub, "sub", a, b, alpha, loc);
}

#define LOOM_BINARY(fn, OP, RULE)                                                                           \
  Tensor fn(const Tensor& a, const Tensor& b, SourceLoc loc) {                                              \
    return binary(ir::Op::OP, #fn, a, b, BinaryRule::RULE, loc);                                            \
  }                                                                                                         \
  Tensor Tensor::fn(const Tensor& o, SourceLoc loc) const { return binary(ir::Op::OP, #fn, *this, o, BinaryRule::RULE, loc); }
#define LOOM_BINARY_SCALAR(fn, OP, RULE)                                                                    \
  LOOM_BINARY(fn, OP, RULE)                                                                                 \
  Tensor fn(const Tensor& a, const Scalar& b, SourceLoc loc) {                                              \
    return binary(ir::Op::OP, #fn, a, b, BinaryRule::RULE, loc);                                            \
  }                                                                                                         \
  Tensor Tensor::fn(const Scalar& o, SourceLoc loc) const { return binary(ir::Op::OP, #fn, *this, o, BinaryRule::RULE, loc); }
LOOM_BINARY_SCALAR(mul, Mul, Arith)
LOOM_BINARY_SCALAR(div, Div, TrueDiv)
LOOM_BINARY(atan2, Atan2, TrueDiv)
LOOM_BINARY(pow, Pow, Arith)
LOOM_BINARY_SCALAR(fmod, Fmod, Arith)
LOOM_BINARY_SCALAR(remainder, Remainder, Arith)
LOOM_BINARY(maximum, Maximum, Arith)
LOOM_BINARY(minimum, Minimum, Arith)
LOOM_BINARY(logical_and, LogicalAnd, Logical)
LOOM_BINARY(logical_or, LogicalOr, Logical)
LOOM_BINARY(eq, Eq, Compare)
LOOM_BINARY(ne, Ne, Compare)
LOOM_BINARY(lt, Lt, Compare)
LOOM_BINARY(le, Le, Compare)
LOOM_BINARY(gt, Gt, Compare)
LOOM_BINARY(ge, Ge, Compare)
#undef LOOM_BINARY
#undef LOOM_BINARY_SCALAR

#define LOOM_COMPARE_SCALAR(fn, OP)                                                                         \
  Tensor Tensor::fn(const Scalar& o, SourceLoc loc) const { return binary(ir::Op::OP, #fn, *this, o, BinaryRule::Compare, loc); }
LOOM_COMPARE_SCALAR(eq, Eq)
LOOM_COMPARE_SCALAR(ne, Ne)
LOOM_COMPARE_SCALAR(lt, Lt)
LOOM_COMPARE_SCALAR(le, Le)
LOOM_COMPARE_SCALAR(gt, Gt)
LOOM_COMPARE_SCALAR(ge, Ge)
#undef LOOM_COMPARE_SCALAR

// An integer tensor to a negative integer power is refused at record time,
// as PyTorch refuses it eagerly (a tensor of exponents gives 0, 1 or -1).
Tensor pow(const Tensor& a, const Scalar& b, SourceLoc loc) {
  impl_of(a, "pow", loc);
  if (detail::autocast::wants_float(a)) return pow(a.to(kFloat, loc), b, loc);
  LOOM_CHECK(!(is_integral(result_type(a, b), true) && b.isIntegral() && b.toLong() < 0), "pow", loc,
             "integers to negative integer powers are not allowed (", detail::describe(a), " to the power ", b, ")");
  // x ** 2 is recorded as x * x: the same correctly rounded value, without
  // a general pow's exp(y * log(x)) in the kernel. (So an exponent changing
  // between 2 and another value changes the graph; any other change does not.)
  ScalarType dt = result_type(a, b);
  if (b.toDouble() == 2.0 && dt != kBool) return mul(a.to(dt, loc), a.to(dt, loc), loc);
  return binary(ir::Op::Pow, "pow", a, b, BinaryRule::Arith, loc);
}
Tensor Tensor::pow(const Scalar& e, SourceLoc loc) const { return loom::pow(*this, e, loc); }
Tensor pow(const Scalar& a, const Tensor& b, SourceLoc loc) {
  return binary(ir::Op::Pow, "pow", a, b, BinaryRule::Arith, loc);
}

Tensor Tensor::add(const Tensor& o, const Scalar& alpha, SourceLoc loc) const { return loom::add(*this, o, alpha, loc); }
Tensor Tensor::add(const Scalar& o, const Scalar& alpha, SourceLoc loc) const { return loom::add(*this, o, alpha, loc); }
Tensor Tensor::sub(const Tensor& o, const Scalar& alpha, SourceLoc loc) const { return loom::sub(*this, o, alpha, loc); }
Tensor Tensor::sub(const Scalar& o, const Scalar& alpha, SourceLoc loc) const { return loom::sub(*this, o, alpha, loc); }

// ---------------------------------------------------------------- where, clamp
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, SourceLoc loc) {
  impl_of(cond, "where", loc);
  impl_of(a, "where", loc);
  impl_of(b, "where", loc);
  LOOM_CHECK(cond.dtype() == kBool, "where", loc, "expected condition to be a boolean tensor, but got ",
             detail::describe(cond));
  detail::check_same_device(cond, a, "where", loc);
  detail::check_same_device(a, b, "where", loc);
  ScalarType dt = result_type(a, b);
  ir::Dims shape = detail::broadcast_shapes(detail::shape_of(cond), detail::shape_of(a), "where", loc);
  shape = detail::broadcast_shapes(shape, detail::shape_of(b), "where", loc);
  Tensor out = wrap(new_node(ir::Op::Where, dt, a.device(), shape,
                             {detail::read(cond, loc), detail::read_as(a, dt, loc), detail::read_as(b, dt, loc)}, loc));
  if (detail::needs_grad(a, b)) [[unlikely]] detail::grad::where(cond, a, b, out, loc);
  return out;
}
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b, SourceLoc loc) {
  impl_of(a, "where", loc);
  return where(cond, a, scalar_tensor(b, TensorOptions(result_type(a, b)).device(a.device()), loc), loc);
}
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b, SourceLoc loc) {
  impl_of(b, "where", loc);
  return where(cond, scalar_tensor(a, TensorOptions(result_type(b, a)).device(b.device()), loc), b, loc);
}
Tensor Tensor::where(const Tensor& condition, const Tensor& other, SourceLoc loc) const {
  return loom::where(condition, *this, other, loc);
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max, SourceLoc loc) {
  const detail::TensorImpl& im = impl_of(x, "clamp", loc);
  LOOM_CHECK(min || max, "clamp", loc, "at least one of 'min' or 'max' must not be None");
  const ScalarType x_dt = im.storage->dtype;
  ScalarType dt = x_dt;
  if (min) dt = promote(dt, result_type_of(x_dt, *min));
  if (max) dt = promote(dt, result_type_of(x_dt, *max));
  LOOM_CHECK(dt != kBool, "clamp", loc, "not supported for bool tensors");
  if (min && max && !detail::needs_grad(x)) {
    // One Clamp node, both bounds runtime scalars (ir/ops.def): the same
    // values as a maximum then a minimum node, half the recording. (With a
    // gradient to record, clamp is the two nodes the rules know.)
    auto n = new_node(ir::Op::Clamp, dt, im.storage->device, im.view.sizes, {detail::read_as(x, dt, loc)}, loc);
    n->scalar[0] = detail::rt_scalar(*min);
    n->scalar[1] = detail::rt_scalar(*max);
    n->num_scalars = 2;
    return wrap(std::move(n));
  }
  Tensor r = x.to(dt, loc);
  if (min) r = binary(ir::Op::Maximum, "clamp", r, *min, BinaryRule::Arith, loc);
  if (max) r = binary(ir::Op::Minimum, "clamp", r, *max, BinaryRule::Arith, loc);
  return r;
}
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max, SourceLoc loc) const {
  return loom::clamp(*this, min, max, loc);
}
Tensor Tensor::clamp_min(const Scalar& min, SourceLoc loc) const { return loom::clamp(*this, min, std::nullopt, loc); }
Tensor Tensor::clamp_max(const Scalar& max, SourceLoc loc) const { return loom::clamp(*this, std::nullopt, max, loc); }

// ---------------------------------------------------------------- in place
namespace {
// self = value, through self's view; the result must fit self's dtype.
Tensor& assign(Tensor& self, const Tensor& value, const char* name, const SourceLoc& loc) {
  ScalarType from = value.dtype(), to = self.dtype();
  LOOM_CHECK(!(category(from) > category(to)), name, loc, "result type ", from,
             " can't be cast to the desired output type ", to);
  const bool tracked = detail::grad::begin_inplace(self, &value, name, loc);
  detail::write_through(self, detail::read(value, loc), name, loc);
  if (tracked) detail::grad::end_inplace(self, value, name, loc);
  return self;
}
}  // namespace

Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha, SourceLoc loc) { return assign(*this, add(o, alpha, loc), "add_", loc); }
Tensor& Tensor::add_(const Scalar& o, const Scalar& alpha, SourceLoc loc) { return assign(*this, add(o, alpha, loc), "add_", loc); }
Tensor& Tensor::sub_(const Tensor& o, const Scalar& alpha, SourceLoc loc) { return assign(*this, sub(o, alpha, loc), "sub_", loc); }
Tensor& Tensor::sub_(const Scalar& o, const Scalar& alpha, SourceLoc loc) { return assign(*this, sub(o, alpha, loc), "sub_", loc); }
Tensor& Tensor::mul_(const Tensor& o, SourceLoc loc) { return assign(*this, mul(o, loc), "mul_", loc); }
Tensor& Tensor::mul_(const Scalar& o, SourceLoc loc) { return assign(*this, mul(o, loc), "mul_", loc); }
Tensor& Tensor::div_(const Tensor& o, SourceLoc loc) { return assign(*this, div(o, loc), "div_", loc); }
Tensor& Tensor::div_(const Scalar& o, SourceLoc loc) { return assign(*this, div(o, loc), "div_", loc); }
Tensor& Tensor::pow_(const Scalar& e, SourceLoc loc) { return assign(*this, pow(e, loc), "pow_", loc); }
Tensor& Tensor::pow_(const Tensor& e, SourceLoc loc) { return assign(*this, pow(e, loc), "pow_", loc); }
Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max, SourceLoc loc) {
  return assign(*this, clamp(min, max, loc), "clamp_", loc);
}
#define LOOM_INPLACE_UNARY(fn)                                                     \
  Tensor& Tensor::fn##_(SourceLoc loc) { return assign(*this, fn(loc), #fn "_", loc); }
LOOM_INPLACE_UNARY(neg)
LOOM_INPLACE_UNARY(abs)
LOOM_INPLACE_UNARY(exp)
LOOM_INPLACE_UNARY(log)
LOOM_INPLACE_UNARY(sqrt)
LOOM_INPLACE_UNARY(tanh)
LOOM_INPLACE_UNARY(sigmoid)
LOOM_INPLACE_UNARY(relu)
LOOM_INPLACE_UNARY(floor)
LOOM_INPLACE_UNARY(round)
LOOM_INPLACE_UNARY(trunc)
LOOM_INPLACE_UNARY(atan)
LOOM_INPLACE_UNARY(asin)
LOOM_INPLACE_UNARY(acos)
#undef LOOM_INPLACE_UNARY
Tensor& Tensor::atan2_(const Tensor& o, SourceLoc loc) { return assign(*this, atan2(o, loc), "atan2_", loc); }

Tensor& Tensor::copy_(const Tensor& src, SourceLoc loc) {
  impl_of(*this, "copy_", loc);
  impl_of(src, "copy_", loc);
  Tensor s = src.device() == device() ? src : src.to(device(), loc);
  ir::Dims shape = detail::broadcast_shapes(detail::shape_of(*this), detail::shape_of(s), "copy_", loc);
  LOOM_CHECK(shape == detail::shape_of(*this), "copy_", loc, "source ", detail::describe(src),
             " is not broadcastable to destination ", detail::describe(*this));
  // Expand the source to the destination's shape, cast to its dtype.
  ir::NodePtr v = detail::read_as(s.expand(sizes(), loc), dtype(), loc);
  const bool tracked = detail::grad::begin_inplace(*this, &s, "copy_", loc);
  detail::write_through(*this, detail::copy_node(std::move(v), loc), "copy_", loc);
  if (tracked) detail::grad::end_copy(*this, s, loc);
  return *this;
}

Tensor& Tensor::fill_(const Scalar& value, SourceLoc loc) {
  impl_of(*this, "fill_", loc);
  auto n = new_node(ir::Op::Full, dtype(), device(), detail::shape_of(*this), loc);
  n->scalar[0] = detail::rt_scalar(value);
  n->num_scalars = 1;
  const bool tracked = detail::grad::begin_inplace(*this, nullptr, "fill_", loc);
  detail::write_through(*this, std::move(n), "fill_", loc);
  if (tracked) detail::grad::end_fill(*this, loc);
  return *this;
}

Tensor& Tensor::zero_(SourceLoc loc) { return fill_(0, loc); }

}  // namespace loom
