// The hooks the op files (api/src/ops_*.cpp, tensor.cpp) call so that a
// recorded op also records its backward node. Each is an inline test of
// grad mode and the inputs' requires_grad flag (a load or two on every op)
// before an out-of-line call that only runs when a gradient is needed.
//
// Primitives call a post-hook with the result they just recorded
// (on_unary, on_binary, ...); the rules are in api/src/autograd/rules_*.cpp.
// Composites with a rule of their own (mean, softmax, mm, addmm, ...) call
// a pre-hook at their top that runs the composite again without recording
// gradients and attaches the one rule to its result.
#pragma once
#include <vector>

#include "api/src/autograd/meta.h"
#include "ir/node.h"

namespace loom::detail::grad {

// A call of a lambda without a heap allocation: the forward of a composite,
// run by its pre-hook.
class Forward {
 public:
  template <class F>
  Forward(F&& f) : obj_(&f), call_([](void* o) { return (*static_cast<std::remove_reference_t<F>*>(o))(); }) {}  // NOLINT
  Tensor operator()() const { return call_(obj_); }

 private:
  void* obj_;
  Tensor (*call_)(void*);
};

// ---- primitives (rules_pointwise.cpp, rules_reduce.cpp, rules_linalg.cpp, rules_index.cpp)
void unary(ir::Op op, const Tensor& x, const Tensor& out, const SourceLoc& loc);
void binary(ir::Op op, const Tensor& a, const Tensor& b, const Tensor& out, const SourceLoc& loc);
void binary(ir::Op op, const Tensor& a, const Scalar& b, const Tensor& out, const SourceLoc& loc);
void binary(ir::Op op, const Scalar& a, const Tensor& b, const Tensor& out, const SourceLoc& loc);
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out, const SourceLoc& loc);
// `out` is the reduction's result, keepdim or not; mask: the reduced dims.
// name: the public op (amax and max have different rules' names).
void reduce(ir::Op op, const char* name, const Tensor& x, uint64_t mask, const Tensor& out, const SourceLoc& loc);
void bmm(const Tensor& a, const Tensor& b, const Tensor& out, const SourceLoc& loc);
void cat(const std::vector<Tensor>& inputs, int64_t dim, const Tensor& out, const SourceLoc& loc);
void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out, const SourceLoc& loc);
void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out, const SourceLoc& loc);
void scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const Tensor& out,
                 const SourceLoc& loc);
// The scatter family's reductions (rules_scatter.cpp); Assign is scatter's.
enum class Reduce : int64_t { Sum, Prod, Mean, Amax, Amin, Assign };
// How many values fold into each element of a scatter reduction's result
// (self's one when include_self), a zero read as one: mean's divisor.
Tensor scatter_count(const Tensor& like, int64_t dim, const Tensor& index, bool include_self, const SourceLoc& loc);
// to(dtype), to(device), clone: the gradient passes through (the engine casts it back).
// cumsum and cumprod (rules_scan.cpp).
void scan(ir::ScanKind kind, const Tensor& x, int64_t dim, const Tensor& out, const SourceLoc& loc);
void copy(const char* name, const Tensor& x, const Tensor& out, const SourceLoc& loc);

inline void on_unary(ir::Op op, const Tensor& x, const Tensor& out, const SourceLoc& loc) {
  if (needs_grad(x)) [[unlikely]] unary(op, x, out, loc);
}
inline void on_binary(ir::Op op, const Tensor& a, const Tensor& b, const Tensor& out, const SourceLoc& loc) {
  if (needs_grad(a, b)) [[unlikely]] binary(op, a, b, out, loc);
}
inline void on_binary(ir::Op op, const Tensor& a, const Scalar& b, const Tensor& out, const SourceLoc& loc) {
  if (needs_grad(a)) [[unlikely]] binary(op, a, b, out, loc);
}
inline void on_binary(ir::Op op, const Scalar& a, const Tensor& b, const Tensor& out, const SourceLoc& loc) {
  if (needs_grad(b)) [[unlikely]] binary(op, a, b, out, loc);
}
inline void on_reduce(ir::Op op, const char* name, const Tensor& x, uint64_t mask, const Tensor& out,
                      const SourceLoc& loc) {
  if (needs_grad(x)) [[unlikely]] reduce(op, name, x, mask, out, loc);
}
inline void on_copy(const char* name, const Tensor& x, const Tensor& out, const SourceLoc& loc) {
  if (needs_grad(x)) [[unlikely]] copy(name, x, out, loc);
}

// ---- views (rules_view.cpp): which view op made `out` from x, and its arguments
struct ViewRule {
  enum Kind : uint8_t { View, Permute, Transpose, Expand, Squeeze, SqueezeDim, Unsqueeze, Slice, Select } kind;
  int64_t a = 0, b = 0, c = 0, d = 0;  // dims / start, end, step / index
  const int64_t* dims = nullptr;       // Permute: the permutation (x.dim() entries)
};
void view(const ViewRule& rule, const Tensor& x, const Tensor& out, const SourceLoc& loc);
// Every view's base link and version, then its history if x needs one.
void on_view(const ViewRule& rule, const Tensor& x, const Tensor& out, const SourceLoc& loc);

// ---- composites with their own rule (pre-hooks; `fwd` is run under NoGradGuard)
Tensor mean(const Tensor& x, uint64_t mask, Forward fwd, const SourceLoc& loc);
Tensor logsumexp(const Tensor& x, uint64_t mask, Forward fwd, const SourceLoc& loc);
// x: the input already converted to the result dtype; dim wrapped.
Tensor softmax(const Tensor& x, int64_t dim, bool log, Forward fwd, const SourceLoc& loc);
Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, Reduce r,
                      bool include_self, Forward fwd, const SourceLoc& loc);
Tensor mm(const Tensor& a, const Tensor& b, Forward fwd, const SourceLoc& loc);
Tensor addmm(const Tensor& self, const Tensor& m1, const Tensor& m2, const Scalar& beta, const Scalar& alpha,
             Forward fwd, const SourceLoc& loc);

// ---- in-place writes (inplace.cpp), around detail::write_through:
//   bool tracked = grad::begin_inplace(self, &value, name, loc);
//   write_through(...);
//   if (tracked) grad::end_inplace(self, history, name, loc);
// begin checks that a leaf needing grad is not overwritten and keeps the
// value's rule from seeing self's new contents; end gives self (or, for a
// view, its base: CopySlices) the written value's history.
bool begin_inplace_slow(const Tensor& self, const Tensor* value, const char* op, const SourceLoc& loc);
inline bool begin_inplace(const Tensor& self, const Tensor* value, const char* op, const SourceLoc& loc) {
  if (!grad_mode() || (!takes_grad(*self.impl()) && !(value && takes_grad(*value->impl())))) return false;
  return begin_inplace_slow(self, value, op, loc);
}
// self = value (an op's result): its history.
void end_inplace(const Tensor& self, const Tensor& value, const char* op, const SourceLoc& loc);
// self = src, broadcast and cast (copy_): CopyBackwards.
void end_copy(const Tensor& self, const Tensor& src, const SourceLoc& loc);
// self = constant (fill_, zero_): FillBackward0.
void end_fill(const Tensor& self, const SourceLoc& loc);

// ---- factories with TensorOptions::requires_grad
Tensor with_requires_grad(Tensor t, const TensorOptions& o, const char* op, const SourceLoc& loc);

}  // namespace loom::detail::grad
