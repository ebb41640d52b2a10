// Gradient rules of the pointwise ops (api/src/ops_pointwise.cpp) and of
// the copies (to, clone). Each rule is written with loom's own ops, so it
// records the gradient lazily and is itself differentiable (create_graph).
// Gradients come back in the broadcast output shape; the engine sums them
// down to each input (fit_gradient).
#include <loom/functions.h>

#include <cmath>
#include <numbers>

#include "api/src/autograd/hooks.h"
#include "api/src/autograd/node.h"
#include "api/src/record.h"

namespace loom::detail::grad {

namespace {

using V = autograd::variable_list;
using Op = ir::Op;

const Scalar kZero(0.0);

// ---------------------------------------------------------------- unary
V neg_b(const OpGrad&, const Tensor& g) { return {g.neg()}; }
V abs_b(const OpGrad& n, const Tensor& g) { return {g * n.saved(0).sign()}; }
V exp_b(const OpGrad& n, const Tensor& g) { return {g * n.saved(0)}; }               // saved: exp(x)
V log_b(const OpGrad& n, const Tensor& g) { return {g / n.saved(0)}; }
V log1p_b(const OpGrad& n, const Tensor& g) { return {g / (n.saved(0) + 1)}; }
V expm1_b(const OpGrad& n, const Tensor& g) { return {g * (n.saved(0) + 1)}; }       // saved: expm1(x)
V sqrt_b(const OpGrad& n, const Tensor& g) { return {g / (n.saved(0) * 2)}; }        // saved: sqrt(x)
V rsqrt_b(const OpGrad& n, const Tensor& g) {                                        // saved: x^-1/2
  Tensor y = n.saved(0);
  return {g * (y * y * y) * -0.5};
}
V sin_b(const OpGrad& n, const Tensor& g) { return {g * n.saved(0).cos()}; }
V cos_b(const OpGrad& n, const Tensor& g) { return {g * n.saved(0).sin().neg()}; }
V tanh_b(const OpGrad& n, const Tensor& g) {                                         // saved: tanh(x)
  Tensor y = n.saved(0);
  return {g * (1 - y * y)};
}
V sigmoid_b(const OpGrad& n, const Tensor& g) {                                      // saved: sigmoid(x)
  Tensor y = n.saved(0);
  return {g * y * (1 - y)};
}
V relu_b(const OpGrad& n, const Tensor& g) { return {where(n.saved(0).gt(0), g, kZero)}; }  // saved: relu(x)
// GELU's and SiLU's gradients are one kernel each in PyTorch, computed in
// float32 for bfloat16 and float16 inputs and rounded once ("opmath"). The
// same here: a 16-bit x and g are widened, the formula runs in float32, and
// the gradient is narrowed once; the casts fuse into the one kernel that
// computes it. (Rounding each of its ~15 ops to bfloat16 both lost accuracy
// and cost GPT-2's step 12 kernels of 289 us on an H200, against ~50 at
// memory speed.)
Tensor opmath(const Tensor& t) { return is_reduced_floating_point(t.dtype()) ? t.to(kFloat) : t; }
Tensor narrowed(const Tensor& grad, const Tensor& like) {
  return grad.dtype() == like.dtype() ? grad : grad.to(like.dtype());
}
V gelu_b(const OpGrad& n, const Tensor& g_in) {
  const Tensor x = opmath(n.saved(0)), g = opmath(g_in);
  Tensor cdf = (erf(x * M_SQRT1_2) + 1) * 0.5;
  Tensor pdf = exp(x * x * -0.5) * (0.5 * M_2_SQRTPI * M_SQRT1_2);  // 1 / sqrt(2 pi)
  return {narrowed(g * (cdf + x * pdf), g_in)};
}
V gelu_tanh_b(const OpGrad& n, const Tensor& g_in) {
  // PyTorch's GeluBackward (approximate="tanh"), term by term.
  constexpr double kBeta = M_SQRT2 * M_2_SQRTPI * 0.5, kKappa = 0.044715;
  const Tensor x = opmath(n.saved(0)), g = opmath(g_in);
  Tensor x_sq = x * x;
  Tensor inner = (x + x_sq * x * kKappa) * kBeta;
  Tensor t = tanh(inner);
  Tensor left_derivative = (t + 1) * 0.5;
  Tensor right_derivative = x * 0.5 * (1 - t * t) * ((x_sq * (3 * kKappa) + 1) * kBeta);
  return {narrowed(g * (left_derivative + right_derivative), g_in)};
}
V silu_b(const OpGrad& n, const Tensor& g_in) {
  const Tensor x = opmath(n.saved(0)), g = opmath(g_in);
  Tensor s = sigmoid(x);
  return {narrowed(g * s * (x * (1 - s) + 1), g_in)};
}
V erf_b(const OpGrad& n, const Tensor& g) {
  Tensor x = n.saved(0);
  return {g * exp((x * x).neg()) * M_2_SQRTPI};
}
V atan_b(const OpGrad& n, const Tensor& g) {
  Tensor x = n.saved(0);
  return {g / (x * x + 1)};
}
V asin_b(const OpGrad& n, const Tensor& g) {  // inf at |x| = 1, NaN beyond, as PyTorch's
  Tensor x = n.saved(0);
  return {g * (-(x * x) + 1).rsqrt()};
}
V acos_b(const OpGrad& n, const Tensor& g) {
  Tensor x = n.saved(0);
  return {-g * (-(x * x) + 1).rsqrt()};
}
V zero_b(const OpGrad&, const Tensor& g) { return {zeros_like(g)}; }  // floor, ceil, round, trunc, sign
V reciprocal_b(const OpGrad& n, const Tensor& g) {                    // saved: 1/x
  Tensor y = n.saved(0);
  return {g * (y * y).neg()};
}
V identity_b(const OpGrad&, const Tensor& g) { return {g}; }

[[noreturn]] void no_rule(Op op, const char* form, const SourceLoc& loc) {
  throw_error(ir::op_name(op), std::string("has no gradient rule for ") + form +
                                   " (record it under NoGradGuard, or detach() its inputs)",
              loc);
}

struct UnaryRule {
  const char* name;
  Vjp vjp;
  bool saves_output;
};

UnaryRule unary_rule(Op op, const SourceLoc& loc) {
  switch (op) {
    case Op::Neg: return {"NegBackward0", neg_b, false};
    case Op::Abs: return {"AbsBackward0", abs_b, false};
    case Op::Exp: return {"ExpBackward0", exp_b, true};
    case Op::Log: return {"LogBackward0", log_b, false};
    case Op::Log1p: return {"Log1PBackward0", log1p_b, false};
    case Op::Expm1: return {"Expm1Backward0", expm1_b, true};
    case Op::Sqrt: return {"SqrtBackward0", sqrt_b, true};
    case Op::Rsqrt: return {"RsqrtBackward0", rsqrt_b, true};
    case Op::Sin: return {"SinBackward0", sin_b, false};
    case Op::Cos: return {"CosBackward0", cos_b, false};
    case Op::Tanh: return {"TanhBackward0", tanh_b, true};
    case Op::Sigmoid: return {"SigmoidBackward0", sigmoid_b, true};
    case Op::Relu: return {"ReluBackward0", relu_b, true};
    case Op::Gelu: return {"GeluBackward0", gelu_b, false};
    case Op::GeluTanh: return {"GeluBackward0", gelu_tanh_b, false};
    case Op::Silu: return {"SiluBackward0", silu_b, false};
    case Op::Erf: return {"ErfBackward0", erf_b, false};
    case Op::Atan: return {"AtanBackward0", atan_b, false};
    case Op::Asin: return {"AsinBackward0", asin_b, false};
    case Op::Acos: return {"AcosBackward0", acos_b, false};
    case Op::Floor: return {"FloorBackward0", zero_b, false};
    case Op::Ceil: return {"CeilBackward0", zero_b, false};
    case Op::Round: return {"RoundBackward0", zero_b, false};
    case Op::Trunc: return {"TruncBackward0", zero_b, false};
    case Op::Sign: return {"SignBackward0", zero_b, false};
    case Op::Reciprocal: return {"ReciprocalBackward0", reciprocal_b, true};
    default: no_rule(op, "this input", loc);
  }
}


// ---------------------------------------------------------------- tensor (op) tensor
V add_b(const OpGrad&, const Tensor& g) { return {g, g}; }
V sub_b(const OpGrad&, const Tensor& g) { return {g, g.neg()}; }
V mul_b(const OpGrad& n, const Tensor& g) {
  return {n.needs(0) ? g * n.saved(1) : Tensor(), n.needs(1) ? g * n.saved(0) : Tensor()};
}
V div_b(const OpGrad& n, const Tensor& g) {
  Tensor b = n.saved(1);
  return {n.needs(0) ? g / b : Tensor(), n.needs(1) ? g.neg() * n.saved(0) / (b * b) : Tensor()};
}
V pow_b(const OpGrad& n, const Tensor& g) {  // saved: base, exponent, result
  Tensor a = n.saved(0), b = n.saved(1);
  Tensor ga, gb;
  if (n.needs(0)) ga = where(b.eq(0), kZero, g * b * pow(a, b - 1));
  // d/db a^b = a^b log a; 0 where a == 0 and b >= 0 (the limit), as in PyTorch.
  if (n.needs(1)) gb = where(a.eq(0).logical_and(b.ge(0)), kZero, g * n.saved(2) * a.log());
  return {ga, gb};
}
// Ties share the gradient equally, as in PyTorch.
V maximum_b(const OpGrad& n, const Tensor& g) {
  Tensor a = n.saved(0), b = n.saved(1);
  Tensor tie = where(a.eq(b), g * 0.5, g);
  return {where(a.lt(b), kZero, tie), where(a.gt(b), kZero, tie)};
}
V minimum_b(const OpGrad& n, const Tensor& g) {
  Tensor a = n.saved(0), b = n.saved(1);
  Tensor tie = where(a.eq(b), g * 0.5, g);
  return {where(a.gt(b), kZero, tie), where(a.lt(b), kZero, tie)};
}
V fmod_b(const OpGrad& n, const Tensor& g) {
  return {g, n.needs(1) ? g.neg() * (n.saved(0) / n.saved(1)).trunc() : Tensor()};
}
V remainder_b(const OpGrad& n, const Tensor& g) {
  return {g, n.needs(1) ? g.neg() * (n.saved(0) / n.saved(1)).floor() : Tensor()};
}
// d/da atan2(a, b) = b / (a^2 + b^2), d/db = -a / (a^2 + b^2): NaN at (0, 0), as PyTorch's.
V atan2_b(const OpGrad& n, const Tensor& g) {
  Tensor a = n.saved(0), b = n.saved(1);
  Tensor scale = g / (a * a + b * b);
  return {scale * b, n.needs(1) ? -(scale * a) : Tensor()};
}

// ---------------------------------------------------------------- tensor (op) scalar
V mul_scalar_b(const OpGrad& n, const Tensor& g) { return {g * n.scalar}; }
V div_scalar_b(const OpGrad& n, const Tensor& g) { return {g / n.scalar}; }
V pow_scalar_b(const OpGrad& n, const Tensor& g) {
  const double e = n.scalar.toDouble();
  if (e == 0) return {zeros_like(g)};
  return {g * pow(n.saved(0), e - 1) * e};
}
V clamp_min_b(const OpGrad& n, const Tensor& g) { return {where(n.saved(0).ge(n.scalar), g, kZero)}; }
V clamp_max_b(const OpGrad& n, const Tensor& g) { return {where(n.saved(0).le(n.scalar), g, kZero)}; }

// ---------------------------------------------------------------- scalar (op) tensor
V rsub_b(const OpGrad&, const Tensor& g) { return {g.neg()}; }
V rdiv_b(const OpGrad& n, const Tensor& g) {  // s / t
  Tensor t = n.saved(0);
  return {g.neg() * n.scalar / (t * t)};
}
V rpow_b(const OpGrad& n, const Tensor& g) {  // s ** t; saved: t, result
  const double s = n.scalar.toDouble();
  Tensor r = g * n.saved(1) * std::log(s);
  return {s == 0 ? where(n.saved(0).ge(0), kZero, r) : r};
}

V where_b(const OpGrad& n, const Tensor& g) {
  Tensor c = n.saved(0);
  return {Tensor(), n.needs(1) ? where(c, g, kZero) : Tensor(), n.needs(2) ? where(c, kZero, g) : Tensor()};
}

}  // namespace

void unary(ir::Op op, const Tensor& x, const Tensor& out, const SourceLoc& loc) {
  if (op == Op::Cast) return copy("ToCopyBackward0", x, out, loc);
  if (!is_floating_point(out.dtype())) return;  // logical_not, a sign of integers: nothing to differentiate
  const UnaryRule r = unary_rule(op, loc);
  auto n = attach(r.name, r.vjp, {&x}, out, loc);
  if (n) n->save(r.saves_output ? out : x, r.saves_output);
}

void binary(ir::Op op, const Tensor& a, const Tensor& b, const Tensor& out, const SourceLoc& loc) {
  if (!is_floating_point(out.dtype())) return;  // comparisons, logical ops
  struct Rule {
    const char* name;
    Vjp vjp;
    bool save_a, save_b, save_out;
  } r;
  switch (op) {
    case Op::Add: r = {"AddBackward0", add_b, false, false, false}; break;
    case Op::Sub: r = {"SubBackward0", sub_b, false, false, false}; break;
    case Op::Mul: r = {"MulBackward0", mul_b, needs_grad(b), needs_grad(a), false}; break;
    case Op::Div: r = {"DivBackward0", div_b, needs_grad(b), true, false}; break;
    case Op::Pow: r = {"PowBackward1", pow_b, true, true, true}; break;
    case Op::Maximum: r = {"MaximumBackward0", maximum_b, true, true, false}; break;
    case Op::Minimum: r = {"MinimumBackward0", minimum_b, true, true, false}; break;
    case Op::Fmod: r = {"FmodBackward0", fmod_b, true, true, false}; break;
    case Op::Remainder: r = {"RemainderBackward0", remainder_b, true, true, false}; break;
    case Op::Atan2: r = {"Atan2Backward0", atan2_b, true, true, false}; break;
    default: no_rule(op, "two tensors", loc);
  }
  auto n = attach(r.name, r.vjp, {&a, &b}, out, loc);
  if (!n) return;
  n->save(r.save_a ? a : Tensor());
  n->save(r.save_b ? b : Tensor());
  if (r.save_out) n->save(out, true);
}

void binary(ir::Op op, const Tensor& a, const Scalar& b, const Tensor& out, const SourceLoc& loc) {
  if (!is_floating_point(out.dtype())) return;
  const char* name;
  Vjp vjp;
  bool save = false;
  switch (op) {
    case Op::Add: name = "AddBackward1", vjp = identity_b; break;
    case Op::Sub: name = "SubBackward1", vjp = identity_b; break;
    case Op::Mul: name = "MulBackward1", vjp = mul_scalar_b; break;
    case Op::Div: name = "DivBackward1", vjp = div_scalar_b; break;
    case Op::Pow: name = "PowBackward0", vjp = pow_scalar_b, save = true; break;
    case Op::Maximum: name = "ClampMinBackward0", vjp = clamp_min_b, save = true; break;
    case Op::Minimum: name = "ClampMaxBackward0", vjp = clamp_max_b, save = true; break;
    case Op::Fmod: name = "FmodBackward1", vjp = identity_b; break;
    case Op::Remainder: name = "RemainderBackward1", vjp = identity_b; break;
    default: no_rule(op, "a tensor and a scalar", loc);
  }
  auto n = attach(name, vjp, {&a}, out, loc);
  if (!n) return;
  n->scalar = b;
  if (save) n->save(a);
}

void binary(ir::Op op, const Scalar& a, const Tensor& b, const Tensor& out, const SourceLoc& loc) {
  if (!is_floating_point(out.dtype())) return;
  std::shared_ptr<OpGrad> n;
  switch (op) {
    case Op::Add: n = attach("AddBackward1", identity_b, {&b}, out, loc); break;
    case Op::Sub: n = attach("RsubBackward1", rsub_b, {&b}, out, loc); break;
    case Op::Mul: n = attach("MulBackward1", mul_scalar_b, {&b}, out, loc); break;
    case Op::Div:
      if ((n = attach("DivBackward0", rdiv_b, {&b}, out, loc))) n->save(b);
      break;
    case Op::Pow:
      if ((n = attach("PowBackward2", rpow_b, {&b}, out, loc))) {
        n->save(b);
        n->save(out, true);
      }
      break;
    default: no_rule(op, "a scalar and a tensor", loc);
  }
  if (n) n->scalar = a;
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out, const SourceLoc& loc) {
  if (!needs_grad(a, b)) return;
  if (auto n = attach("WhereBackward0", where_b, {&cond, &a, &b}, out, loc)) n->save(cond);
}

void copy(const char* name, const Tensor& x, const Tensor& out, const SourceLoc& loc) {
  attach(name, identity_b, {&x}, out, loc);
}

}  // namespace loom::detail::grad
