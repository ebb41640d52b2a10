#include "runtime/interp/interp_kernel.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <loom/bfloat16.h>

#include "ir/dtype_dispatch.h"
#include "ir/philox.h"
#include "runtime/backend.h"
#include "runtime/reference/scalar_ops.h"

namespace loom::runtime::interp {

namespace {

using ir::ExprKind;
using ir::Op;

// A value of any dtype: floating ones (float32, bfloat16, float16, float64) in f,
// integers and bool in i. A float32 value is always one float32 holds.
struct Value {
  double f = 0;
  int64_t i = 0;
};

template <class T>
constexpr bool kReal = std::is_floating_point_v<T> || ir::is_reduced_float_v<T>;

template <class T>
T get(const Value& v) {
  if constexpr (ir::is_reduced_float_v<T>) return T(static_cast<float>(v.f));
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v.f);
  else if constexpr (std::is_same_v<T, bool>) return v.i != 0;
  else return static_cast<T>(v.i);
}
template <class T>
Value put(T x) {
  Value v;
  if constexpr (kReal<T>) v.f = static_cast<double>(static_cast<std::conditional_t<ir::is_reduced_float_v<T>, float, T>>(x));
  else v.i = static_cast<int64_t>(x);
  return v;
}

// Reads element `at` of a buffer of dtype `dt`; writes one.
Value read(const void* buf, ScalarType dt, int64_t at) {
  return ir::dispatch_dtype(dt, [&]<class T>() { return put<T>(static_cast<const T*>(buf)[at]); });
}
void write(void* buf, ScalarType dt, int64_t at, const Value& v) {
  ir::dispatch_dtype(dt, [&]<class T>() { static_cast<T*>(buf)[at] = get<T>(v); });
}

// Bad data in the op of node `node`.
struct FailAt {
  uint32_t node;
  [[noreturn]] void operator()(const std::string& message) const { throw RunError{node, message}; }
};

// The kernel being run: its position in its loops and what it knows there.
class Interpreter {
 public:
  Interpreter(const ir::KernelProgram& p, const ir::Kernel& k, void* const* bufs, std::span<const ir::RtScalar> scalars)
      : p_(p), k_(k), bufs_(bufs), scalars_(scalars), idx_(k.loop.n, 0), values_(k.exprs.size()),
        rows_(k.phases.size()) {
    if (k.contraction) {  // the exprs an operand's fused producers evaluate, per element of it
      for (int side = 0; side < 2; ++side)
        if (k.contraction->fused_operand(side)) producers_[side] = needed({k.contraction->value(side)});
    }
  }

  void run() {
    nest(0, k_.outer, [&] {
      for (size_t ph = 0; ph < k_.phases.size(); ++ph) run_phase(k_.phases[ph], ph);
    });
  }

 private:
  // Calls f at every position of loops [from, to), row-major.
  template <class F>
  void nest(int from, int to, F&& f) {
    if (from >= to) return f();
    for (int64_t i = 0; i < k_.loop[from]; ++i) {
      idx_[from] = i;
      nest(from + 1, to, f);
    }
    idx_[from] = 0;
  }

  // Exprs `roots` need, operands first (exprs are numbered after their operands).
  std::vector<uint32_t> needed(std::vector<uint32_t> roots) const {
    std::vector<bool> need(k_.exprs.size(), false);
    while (!roots.empty()) {
      const uint32_t e = roots.back();
      roots.pop_back();
      if (need[e]) continue;
      need[e] = true;
      for (int o = 0; o < ir::operand_count(k_.exprs[e]); ++o) roots.push_back(ir::operand(k_.exprs[e], o));
    }
    std::vector<uint32_t> order;
    for (uint32_t e = 0; e < need.size(); ++e)
      if (need[e]) order.push_back(e);
    return order;
  }

  void run_phase(const ir::Phase& ph, size_t at) {
    std::vector<uint32_t> roots;
    if (ph.kind == ir::Phase::Reduce) roots.push_back(ph.value);
    for (auto [a, e] : ph.stores) roots.push_back(e);
    const std::vector<uint32_t> exprs = needed(roots);
    auto store = [&] {
      for (auto [a, e] : ph.stores) {
        const ir::Access& x = k_.accesses[a];
        write(bufs_[x.buffer], p_.buffers[x.buffer].dtype, offset(x), values_[e]);
      }
    };
    if (ph.kind == ir::Phase::Store && ph.per_row) {  // once per row: its accesses index the outer loops only
      evaluate(exprs);
      return store();
    }
    if (ph.kind == ir::Phase::Store) {
      return nest(k_.outer, k_.loop.n, [&] {
        evaluate(exprs);
        store();
      });
    }
    // A reduction over the row, in row-major order; a bfloat16 or float16
    // one in float32, rounded once where it is read (RowValue).
    const ScalarType dt = is_reduced_floating_point(k_.exprs[ph.value].dtype) ? kFloat : k_.exprs[ph.value].dtype;
    Value acc = identity(ph.reduce_op, dt);
    // A floating sum is added up in float64 and rounded once: one serial
    // chain of float32 additions drifts far more than the JIT's split
    // partial sums, and the op suite holds every backend to their accuracy.
    const bool wide_sum = ph.reduce_op == Op::Sum && is_floating_point(dt);
    double sum = 0;
    int64_t position = 0, best = 0;
    bool any_nan = false;
    nest(k_.outer, k_.loop.n, [&] {
      evaluate(exprs);
      const Value v = values_[ph.value];
      if (ph.reduce_op == Op::ArgMax || ph.reduce_op == Op::ArgMin) {
        // The first best value; a NaN is the best (the first one), as PyTorch.
        const bool nan = is_floating_point(dt) && std::isnan(v.f);
        const bool better = position == 0 || (!any_nan && (nan || (ph.reduce_op == Op::ArgMax ? greater(v, acc, dt)
                                                                                                 : greater(acc, v, dt))));
        if (better) acc = v, best = position;
        any_nan = any_nan || nan;
      } else if (wide_sum) {
        sum += v.f;
      } else {
        acc = fold(ph.reduce_op, dt, acc, v);
      }
      ++position;
    });
    if (wide_sum) acc = ir::dispatch_dtype(dt, [&]<class T>() { return put<T>(static_cast<T>(sum)); });
    rows_[at] = ph.reduce_op == Op::ArgMax || ph.reduce_op == Op::ArgMin ? Value{0, best} : acc;
  }

  void evaluate(const std::vector<uint32_t>& exprs) {
    for (uint32_t e : exprs) values_[e] = value(k_.exprs[e], e);
  }

  int64_t offset(const ir::Access& a) const {
    int64_t at = a.offset + (a.has_runtime_offset() ? scalars_[a.offset_scalar].i : 0);
    for (uint8_t d = 0; d < a.strides.n; ++d) at += a.strides[d] * idx_[d];
    return at;
  }

  Value value(const ir::Expr& x, uint32_t e) {
    switch (x.kind) {
      case ExprKind::Load: {
        const ir::Access& a = k_.accesses[x.a];
        return read(bufs_[a.buffer], p_.buffers[a.buffer].dtype, offset(a));
      }
      case ExprKind::Gather: {  // moved along one dim by a checked index (in range)
        const ir::Access& a = k_.accesses[x.a];
        return read(bufs_[a.buffer], p_.buffers[a.buffer].dtype, offset(a) + values_[x.b].i * x.imm);
      }
      case ExprKind::Scalar:
        return ir::dispatch_dtype(x.dtype, [&]<class T>() { return put<T>(reference::from_scalar<T>(scalars_[x.a])); });
      case ExprKind::Const:
        return ir::dispatch_dtype(x.dtype, [&]<class T>() { return put<T>(static_cast<T>(x.imm)); });
      case ExprKind::Iota: return Value{0, x.a == ~0u ? 0 : idx_[x.a]};
      case ExprKind::RowValue: {
        Value v = rows_[x.a];
        if (x.dtype == kBFloat16) v.f = static_cast<float>(BFloat16(static_cast<float>(v.f)));  // summed in float32, rounded once
        if (x.dtype == kHalf) v.f = static_cast<float>(Half(static_cast<float>(v.f)));
        return v;
      }
      case ExprKind::Operand: return operand_[x.a];
      case ExprKind::Contract: return product(x.dtype);
      case ExprKind::Op: return op(x, e);
    }
    throw Error("loom: interp: an expression kind it does not know (runtime/interp/interp_kernel.cpp)");
  }

  // The kernel's matrix product at the current position: sum over t < k of
  // A[a + t a_k] B[b + t b_k], each operand element through its fused
  // producers, accumulated in the Contract's dtype (a floating one in
  // float64, rounded once, for the reason run_phase gives).
  Value product(ScalarType dt) {
    const ir::Contraction& c = *k_.contraction;
    const ir::Access &a = k_.accesses[c.a], &b = k_.accesses[c.b];
    return ir::dispatch_dtype(dt, [&]<class T>() {
      using Acc = std::conditional_t<kReal<T>, double, T>;
      Acc acc = Acc(0);
      for (int64_t t = 0; t < c.k; ++t) {
        const Value x = element(0, a, t * c.a_k), y = element(1, b, t * c.b_k);
        if constexpr (kReal<T>) acc += static_cast<double>(get<T>(x)) * static_cast<double>(get<T>(y));
        else acc = static_cast<T>(acc + get<T>(x) * get<T>(y));
      }
      return put<T>(static_cast<T>(acc));
    });
  }
  Value element(int side, const ir::Access& a, int64_t moved) {
    Value v = read(bufs_[a.buffer], p_.buffers[a.buffer].dtype, offset(a) + moved);
    if (producers_[side].empty()) return v;
    operand_[side] = v;
    evaluate(producers_[side]);
    return values_[k_.contraction->value(side)];
  }

  Value op(const ir::Expr& x, uint32_t e) {
    const FailAt fail{static_cast<uint32_t>(x.imm)};
    const Value& a = values_[x.a];
    if (x.op == Op::RandUniform || x.op == Op::RandNormal) {  // (counter, seed), as ir/philox.h defines them
      const auto counter = static_cast<uint64_t>(a.i), seed = static_cast<uint64_t>(values_[x.b].i);
      const bool normal = x.op == Op::RandNormal;
      const double u = normal ? ir::philox::normal(seed, counter, 0) : ir::philox::uniform(seed, counter, 0);
      if (x.dtype == kFloat || is_reduced_floating_point(x.dtype))
        return ir::dispatch_dtype(x.dtype, [&]<class T>() { return put<T>(T(normal ? static_cast<float>(u) : ir::philox::uniform_f32(u))); });
      return ir::dispatch_dtype(x.dtype, [&]<class T>() { return put<T>(static_cast<T>(u)); });
    }
    const ScalarType in = k_.exprs[x.a].dtype;
    switch (ir::op_family(x.op)) {
      case ir::Family::Unary:
        if (x.op == Op::Cast)
          return ir::dispatch_dtype(in, [&]<class In>() {
            return ir::dispatch_dtype(x.dtype, [&]<class Out>() { return put<Out>(reference::cast_value<Out>(get<In>(a))); });
          });
        return ir::dispatch_dtype(in, [&]<class T>() { return put<T>(reference::unary_value<T>(x.op, get<T>(a))); });
      case ir::Family::Binary: {
        const Value& b = values_[x.b];
        return ir::dispatch_dtype(in, [&]<class T>() {
          if (reference::is_comparison(x.op)) return put<bool>(reference::compare_value<T>(x.op, get<T>(a), get<T>(b)));
          return put<T>(reference::arith_value<T>(fail, x.op, get<T>(a), get<T>(b)));
        });
      }
      case ir::Family::Ternary: return a.i != 0 ? values_[x.b] : values_[x.c];  // where(cond, a, b)
      default: break;
    }
    (void)e;
    throw Error(std::string("loom: interp: no code for ") + ir::op_name(x.op) +
                " in an expression (runtime/interp/interp_kernel.cpp)");
  }

  static bool greater(const Value& x, const Value& y, ScalarType dt) {
    return is_floating_point(dt) ? x.f > y.f : x.i > y.i;
  }
  static Value identity(Op op, ScalarType dt) {
    return ir::dispatch_dtype(dt, [&]<class T>() {
      using L = std::numeric_limits<std::conditional_t<ir::is_reduced_float_v<T>, float, T>>;
      switch (op) {
        case Op::Sum: case Op::Any: case Op::ArgMax: case Op::ArgMin: return put<T>(T(0));
        case Op::Prod: case Op::All: return put<T>(T(1));
        case Op::Max: return put<T>(T(L::has_infinity ? -L::infinity() : L::lowest()));
        case Op::Min: return put<T>(T(L::has_infinity ? L::infinity() : L::max()));
        default: throw Error(std::string("loom: interp: no reduction ") + ir::op_name(op));
      }
    });
  }
  // acc op v in dt: sums and products wrap for integers, a NaN wins max and min.
  static Value fold(Op op, ScalarType dt, const Value& acc, const Value& v) {
    return ir::dispatch_dtype(dt, [&]<class T>() {
      const T x = get<T>(acc), y = get<T>(v);
      const FailAt never{0};
      switch (op) {
        case Op::Sum: case Op::Any: return put<T>(reference::arith_value<T>(never, Op::Add, x, y));
        case Op::Prod: case Op::All: return put<T>(reference::arith_value<T>(never, Op::Mul, x, y));
        case Op::Max: return put<T>(reference::arith_value<T>(never, Op::Maximum, x, y));
        case Op::Min: return put<T>(reference::arith_value<T>(never, Op::Minimum, x, y));
        default: throw Error(std::string("loom: interp: no reduction ") + ir::op_name(op));
      }
    });
  }

  const ir::KernelProgram& p_;
  const ir::Kernel& k_;
  void* const* bufs_;
  std::span<const ir::RtScalar> scalars_;
  std::vector<int64_t> idx_;       // the current position in the kernel's loops
  std::vector<Value> values_;      // per expr, its value at that position
  std::vector<Value> rows_;        // per reduce phase, its value for the current row (an arg's position in i)
  std::vector<uint32_t> producers_[2];  // the exprs of a fused operand's producers
  Value operand_[2];               // the operand element they transform
};

}  // namespace

void run_kernel(const ir::KernelProgram& p, const ir::Kernel& k, void* const* bufs,
                std::span<const ir::RtScalar> scalars) {
  Interpreter(p, k, bufs, scalars).run();
}

}  // namespace loom::runtime::interp
