// KernelEmitter (jit/cuda/kernel_emitter.h): what a kernel keeps in
// registers between phases (the row stash, early loads) and its bodies:
// each expression of the loop IR as C, loads and stores.
#include "jit/cuda/kernel_emitter.h"

#include <loom/error.h>

#include <algorithm>
#include <sstream>


namespace loom::jit::cuda::detail {

// ---------------------------------------------------------------- row stash
// As in the LLVM generator: a value computed in a reduce phase and read
// again by a later phase of the same row is kept (here in registers)
// rather than loaded or computed twice. Loads count too: on a GPU the
// second read of a row is the cost worth saving.
void KernelEmitter::plan_stash() {
  const size_t n = k_.exprs.size();
  stash_.assign(n, false);
  early_.assign(n, false);
  first_.assign(n, -1);
  if (!plan_.per_thread) return;
  std::vector<int> last(n, -1);
  for (size_t ph = 0; ph < k_.phases.size(); ++ph) {
    phase_ = -1;
    std::vector<bool> need = needed(k_.phases[ph]);
    for (size_t e = 0; e < n; ++e) {
      if (!need[e]) continue;
      if (first_[e] < 0) first_[e] = static_cast<int>(ph);
      if (!k_.phases[ph].per_row) last[e] = static_cast<int>(ph);
    }
  }
  int regs = 0;
  for (size_t e = 0; e < n; ++e) {
    const ir::Expr& x = k_.exprs[e];
    const int f = first_[e];
    const bool worth = ir::reads_memory(x) || (x.kind == ExprKind::Op && ir::costly_op(x.op));
    if (!worth || !varies_[e] || f < 0 || last[e] <= f || k_.phases[f].per_row) continue;
    const int cost = stash_regs(x.dtype);
    if (regs + cost > kMaxStashRegs) continue;
    regs += cost;
    stash_[e] = true;
  }
  plan_early_loads();
}

// Loads that only a later phase needs (W3's weight and bias, read by its
// store phase) are issued with phase 0's loads and stashed: their latency
// then hides behind the row's own loads and the reductions instead of
// stalling the last phase after the final barrier. H200, W3's kernel
// alone (bench/micro/row_kernels.cu): 69.6 -> 67.5 us, against 65.6 us
// for a copy of the same bytes. Not past a phase that stores into the
// load's buffer (an in-place update read back later).
void KernelEmitter::plan_early_loads() {
  if (k_.phases.size() < 2 || k_.phases[0].kind != ir::Phase::Reduce || k_.phases[0].per_row) return;
  int regs = 0;
  for (size_t e = 0; e < k_.exprs.size(); ++e) {
    const ir::Expr& x = k_.exprs[e];
    const int f = first_[e];
    if (x.kind != ExprKind::Load || !varies_[e] || f <= 0 || stash_[e] || k_.phases[f].per_row) continue;
    bool stored_before = false;
    for (int ph = 0; ph < f; ++ph)
      for (auto [a, v] : k_.phases[ph].stores)
        stored_before = stored_before || k_.accesses[a].buffer == k_.accesses[x.a].buffer;
    const int cost = stash_regs(x.dtype);
    if (stored_before || regs + cost > kMaxEarlyRegs) continue;
    regs += cost;
    early_[e] = stash_[e] = true;
    first_[e] = 0;
  }
}

std::vector<bool> KernelEmitter::needed(const ir::Phase& ph) {
  std::vector<bool> need(k_.exprs.size(), false);
  if (ph.kind == ir::Phase::Reduce) mark(ph.value, need);
  for (auto [a, e] : ph.stores) mark(e, need);
  if (&ph == &k_.phases.front())
    for (size_t e = 0; e < early_.size(); ++e)
      if (early_[e]) need[e] = true;
  return need;
}

void KernelEmitter::mark(uint32_t e, std::vector<bool>& need) {
  if (need[e]) return;
  need[e] = true;
  if (reloaded(e)) return;
  const ir::Expr& x = k_.exprs[e];
  for (int o = 0; o < ir::operand_count(x); ++o) mark(ir::operand(x, o), need);
}

// The phase's invariant values, before its element loop.
void KernelEmitter::hoisted(const std::vector<bool>& need, const char* in) {
  for (size_t e = 0; e < k_.exprs.size(); ++e)
    if (need[e] && !varies_[e])
      o_ << in << "const " << ctype(k_.exprs[e].dtype) << " x" << e << " = " << rounded(k_.exprs[e], static_cast<uint32_t>(e)) << ";\n";
}

void KernelEmitter::body(const std::vector<bool>& need, const char* in) {
  for (size_t e = 0; e < k_.exprs.size(); ++e) {
    if (!need[e] || !varies_[e]) continue;
    const ir::Expr& x = k_.exprs[e];
    o_ << in << "const " << ctype(x.dtype) << " x" << e << " = ";
    if (reloaded(static_cast<uint32_t>(e))) o_ << "s" << e << stash_slot();
    else o_ << rounded(x, static_cast<uint32_t>(e));
    o_ << ";\n";
    if (!stash_.empty() && stash_[e] && first_[e] == phase_) o_ << in << "s" << e << stash_slot() << " = x" << e << ";\n";
  }
}

// Element offset of access `a` at the current indices; in a lane loop the
// innermost index is advanced by `lane` (e.g. "l").
std::string KernelEmitter::offset(const ir::Access& a, const std::string& lane) {
  const uint32_t ai = access_index(a);
  std::string s = access_offset(ai);
  if (a.has_runtime_offset()) s += " + is[" + std::to_string(a.offset_scalar) + "]";
  const int n = k_.loop.n;
  for (int d = 0; d < a.strides.n; ++d) {
    if (!a.strides[d]) continue;
    std::string i = "i" + std::to_string(d);
    if (d == n - 1 && !lane.empty()) i = "(" + i + " + " + lane + ")";
    s += " + " + i + " * " + stride(ai, d);
  }
  return s;
}

std::string KernelEmitter::extent_product(int from, int to, int64_t divisor) const {
  bool lifted = false;
  for (int d = from; d < to; ++d) lifted = lifted || sizes_.lifted_loop(d);
  if (!lifted) return std::to_string(prod(k_.loop, from, to) / divisor) + "LL";
  std::string s = "(1LL";
  for (int d = from; d < to; ++d) s += " * " + extent(d);
  return s + (divisor == 1 ? ")" : ") / " + std::to_string(divisor) + "LL");
}

// A bfloat16 (float16) value is a float holding a number bfloat16
// (float16) represents: a load widens it exactly, each computed value is
// rounded to nearest even (as the reference backend rounds per op), a
// store keeps the 16 bits.
std::string KernelEmitter::rounded(const ir::Expr& x, uint32_t e) {
  if (!ir::is_computed(x)) return value(x, e);
  if (x.dtype == kBFloat16) return "loom_bf16_round(" + value(x, e) + ")";
  if (x.dtype == kHalf) return "loom_f16_round(" + value(x, e) + ")";
  return value(x, e);
}

std::string KernelEmitter::value(const ir::Expr& x, uint32_t e) {
  switch (x.kind) {
    case ExprKind::Load: {
      if (preloaded_) return "loaded.x" + std::to_string(e);
      const ir::Access& a = k_.accesses[x.a];
      std::string v = lane_vector(x.a) && lane_ ? "ld" + std::to_string(e) + "[l]"
                      : !from_tile_.empty() && from_tile_[x.a]
                          ? "tile" + std::to_string(x.a) + "[tx][ty + j]"  // emit_tiled's stage
                          : "b" + std::to_string(a.buffer) + "[" + offset(a, lane_index()) + "]";
      if (x.dtype == kBFloat16) return "loom_bf16_widen(" + v + ")";
      if (x.dtype == kHalf) return "loom_f16_widen(" + v + ")";
      return x.dtype == kBool ? "(" + v + " != 0)" : v;
    }
    case ExprKind::Gather: {  // in range: x.b is an IndexCheck (0 where the run fails)
      const ir::Access& a = k_.accesses[x.a];
      const std::string v = "b" + std::to_string(a.buffer) + "[" + offset(a, lane_index()) + " + x" +
                            std::to_string(x.b) + " * " + imm(e) + "]";
      if (x.dtype == kBFloat16) return "loom_bf16_widen(" + v + ")";
      if (x.dtype == kHalf) return "loom_f16_widen(" + v + ")";
      return x.dtype == kBool ? "(" + v + " != 0)" : v;
    }
    case ExprKind::Scalar: {
      const std::string s = std::to_string(x.a);
      switch (x.dtype) {
        case kBool: return "(fs[" + s + "] != 0.0 || is[" + s + "] != 0)";
        case kInt: return "(int)is[" + s + "]";
        case kLong: return "is[" + s + "]";
        case kFloat: return "(float)fs[" + s + "]";
        case kDouble: return "fs[" + s + "]";
        case kBFloat16: return "(float)fs[" + s + "]";
        case kHalf: return "(float)fs[" + s + "]";
        case kByte: return "(unsigned char)is[" + s + "]";
        case kChar: return "(signed char)is[" + s + "]";
        case kShort: return "(short)is[" + s + "]";
      }
      return "0";
    }
    case ExprKind::RowValue: return "(" + std::string(ctype(x.dtype)) + ")rv" + std::to_string(x.a);
    case ExprKind::Iota: {
      if (x.a == ~0u) return "0LL";
      std::string i = "i" + std::to_string(x.a);
      if (lane_ && static_cast<int>(x.a) + 1 == k_.loop.n) i = "(" + i + " + l)";
      return i;
    }
    case ExprKind::Contract: return "acc";
    case ExprKind::Operand: return "opx";
    case ExprKind::Const: return "((" + std::string(ctype(x.dtype)) + ")" + imm(e) + ")";
    case ExprKind::Op: break;
  }
  if (x.op == Op::RandUniform || x.op == Op::RandNormal) {
    // ir/philox.h at (seed, counter): the library kernel's bits.
    const std::string args = "(u64)x" + std::to_string(x.b) + ", (u64)x" + std::to_string(x.a) + ", 0ULL";
    if (x.op == Op::RandNormal) return "(" + std::string(ctype(x.dtype)) + ")loom::ir::philox::normal(" + args + ")";
    const std::string u = "loom::ir::philox::uniform(" + args + ")";
    return x.dtype != kDouble ? "loom::ir::philox::uniform_f32(" + u + ")" : u;
  }
  const Family f = ir::op_family(x.op);
  const std::string a = "x" + std::to_string(x.a);
  if (f == Family::Unary) return unary(x.op, a, k_.exprs[x.a].dtype, x.dtype);
  const std::string b = "x" + std::to_string(x.b);
  if (f == Family::Ternary) return "(" + a + " ? " + b + " : x" + std::to_string(x.c) + ")";
  // An op that can fail names its own node in the error word (ir::Expr::imm).
  return binary(x.op, a, b, k_.exprs[x.a].dtype, ir::can_fail_op(x.op) ? static_cast<uint32_t>(x.imm) : k_.root);
}

// An op this generator has no case for: an op added to ir/ops.def but not
// here must fail where it is compiled, never compute something else.
[[noreturn]] void KernelEmitter::no_code(Op op, ScalarType dt) {
  throw Error(std::string("loom: cuda: no code for ") + ir::op_name(op) + " on " + std::string(to_string(dt)) +
              " (jit/cuda/emit_expr.cpp has no case for it)");
}

std::string KernelEmitter::unary(Op op, const std::string& x, ScalarType in, ScalarType out) {
  if (op == Op::Cast) {
    if (in == out) return x;
    if (out == kBool) return "(" + x + " != 0)";
    // A float becoming a narrow integer: truncated to int64, then wrapped
    // (runtime/reference/scalar_ops.h: cast_value).
    if (fp(in) && is_integral(out) && element_size(out) < 4) return "(" + std::string(ctype(out)) + ")(long long)" + x;
    return "(" + std::string(ctype(out)) + ")" + x;
  }
  if (op == Op::LogicalNot) return "!" + x;
  if (in == kBool) return x;
  const char* T = ctype(in);
  if (!fp(in)) {
    switch (op) {
      case Op::Neg: return "loom_sub((" + std::string(T) + ")0, " + x + ")";
      case Op::Abs: return "(" + x + " < 0 ? loom_sub((" + std::string(T) + ")0, " + x + ") : " + x + ")";
      case Op::Relu: return "(" + x + " > 0 ? " + x + " : (" + T + ")0)";
      case Op::Sign: return "(" + std::string(T) + ")((" + x + " > 0) - (" + x + " < 0))";
      case Op::Floor: case Op::Ceil: case Op::Round: case Op::Trunc: return x;  // an integer is its own floor
      default: no_code(op, in);
    }
  }
  auto c = [&](double v) { return lit(v, in); };
  auto call = [&](const char* name, const std::string& arg) { return fn(name, in) + "(" + arg + ")"; };
  switch (op) {
    case Op::Neg: return "(-" + x + ")";
    case Op::Abs: return call("fabs", x);
    case Op::Exp: return call("exp", x);
    case Op::Log: return call("log", x);
    case Op::Log1p: return call("log1p", x);
    case Op::Expm1: return call("expm1", x);
    case Op::Sqrt: return call("sqrt", x);
    case Op::Rsqrt: return "(" + c(1) + " / " + call("sqrt", x) + ")";
    case Op::Sin: return call("sin", x);
    case Op::Cos: return call("cos", x);
    case Op::Tanh: return call("tanh", x);
    case Op::Sigmoid: return "(" + c(1) + " / (" + c(1) + " + " + call("exp", "-" + x) + "))";
    case Op::Relu: return "(!(" + x + " <= " + c(0) + ") ? " + x + " : " + c(0) + ")";  // NaN stays NaN
    case Op::Gelu: return "(" + c(0.5) + " * " + x + " * (" + c(1) + " + " + call("erf", x + " * " + c(0.70710678118654752440)) + "))";
    case Op::GeluTanh:
      return "(" + c(0.5) + " * " + x + " * (" + c(1) + " + " +
             call("tanh", c(0.79788456080286535588) + " * (" + x + " + " + c(0.044715) + " * " + x + " * " + x + " * " + x + ")") + "))";
    case Op::Silu: return "(" + x + " / (" + c(1) + " + " + call("exp", "-" + x) + "))";
    case Op::Erf: return call("erf", x);
    case Op::Atan: return call("atan", x);
    case Op::Asin: return call("asin", x);
    case Op::Acos: return call("acos", x);
    case Op::Floor: return call("floor", x);
    case Op::Ceil: return call("ceil", x);
    case Op::Round: return call("rint", x);  // half to even
    case Op::Trunc: return call("trunc", x);
    case Op::Sign: return "(" + x + " > " + c(0) + " ? " + c(1) + " : " + x + " < " + c(0) + " ? " + c(-1) + " : " + c(0) + ")";
    case Op::Reciprocal: return "(" + c(1) + " / " + x + ")";
    default: no_code(op, in);
  }
}

std::string KernelEmitter::binary(Op op, const std::string& a, const std::string& b, ScalarType dt, uint32_t fail_node) {
  auto infix = [&](const char* o) { return "(" + a + " " + o + " " + b + ")"; };
  auto call = [&](const std::string& f) { return f + "(" + a + ", " + b + ")"; };
  switch (op) {
    case Op::Eq: return infix("==");
    case Op::Ne: return infix("!=");
    case Op::Lt: return infix("<");
    case Op::Le: return infix("<=");
    case Op::Gt: return infix(">");
    case Op::Ge: return infix(">=");
    default: break;
  }
  if (dt == kBool) {
    switch (op) {
      case Op::Mul: case Op::Minimum: case Op::LogicalAnd: return infix("&&");
      case Op::Add: case Op::Maximum: case Op::LogicalOr: return infix("||");
      default: no_code(op, dt);
    }
  }
  if (fp(dt)) {
    switch (op) {
      case Op::Add: return infix("+");
      case Op::Sub: return infix("-");
      case Op::Mul: return infix("*");
      case Op::Div: return infix("/");
      case Op::Pow: return call(fn("pow", dt));
      case Op::Atan2: return call(fn("atan2", dt));
      case Op::Maximum: return call("loom_fmax");
      case Op::Minimum: return call("loom_fmin");
      case Op::Fmod: return call(fn("fmod", dt));
      case Op::Remainder: {
        const std::string m = fn("fmod", dt) + "(" + a + ", " + b + ")";
        return "([&] { const " + std::string(ctype(dt)) + " m = " + m + "; return (m != 0 && ((" + b + " < 0) != (m < 0))) ? m + " +
               b + " : m; }())";
      }
      default: no_code(op, dt);
    }
  }
  const std::string node = single_block_ ? std::to_string(fail_node) : "nd[" + std::to_string(fail_node) + "]";
  switch (op) {
    case Op::Add: return call("loom_add");
    case Op::Sub: return call("loom_sub");
    case Op::Mul: return call("loom_mul");
    case Op::Maximum: return call("loom_imax");
    case Op::Minimum: return call("loom_imin");
    case Op::Pow: return call("loom_ipow");
    case Op::Fmod: return "loom_imod(" + a + ", " + b + ", false, err, " + node + ")";
    case Op::Remainder: return "loom_imod(" + a + ", " + b + ", true, err, " + node + ")";
    case Op::IndexCheck: return "loom_index_check(" + a + ", " + b + ", err, " + node + ")";
    default: no_code(op, dt);
  }
}

std::string KernelEmitter::to_memory(uint32_t e) {
  const std::string v = "x" + std::to_string(e);
  if (k_.exprs[e].dtype == kBFloat16) return "loom_bf16_narrow(" + v + ")";
  if (k_.exprs[e].dtype == kHalf) return "loom_f16_narrow(" + v + ")";
  return k_.exprs[e].dtype == kBool ? "(unsigned char)" + v : v;
}

void KernelEmitter::store(uint32_t ai, uint32_t e, const char* in) {
  const ir::Access& a = k_.accesses[ai];
  o_ << in << "b" << a.buffer << "[" << offset(a, lane_index()) << "] = " << to_memory(e) << ";\n";
}


}  // namespace loom::jit::cuda::detail
