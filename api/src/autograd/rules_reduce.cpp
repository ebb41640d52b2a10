// Gradient rules of the reductions (api/src/ops_reduce.cpp) and of softmax
// and log_softmax (api/src/ops_index.cpp). A reduced gradient is viewed
// with the reduced dims kept (size 1) and expanded back over them.
#include <loom/functions.h>

#include "api/src/autograd/hooks.h"
#include "api/src/autograd/node.h"
#include "api/src/record.h"

namespace loom::detail::grad {

namespace {

using V = autograd::variable_list;
using Op = ir::Op;

// node.shape: the input's shape; node.ints[0]: the mask of reduced dims.
std::vector<int64_t> kept_shape(const OpGrad& n) {
  std::vector<int64_t> keep(n.shape.begin(), n.shape.end());
  const uint64_t mask = static_cast<uint64_t>(n.ints[0]);
  for (size_t d = 0; d < keep.size(); ++d)
    if (mask >> d & 1) keep[d] = 1;
  return keep;
}
std::vector<int64_t> reduced_dims(const OpGrad& n) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < n.shape.n; ++d)
    if (static_cast<uint64_t>(n.ints[0]) >> d & 1) dims.push_back(static_cast<int64_t>(d));
  return dims;
}
// A reduced value (any keepdim) with the reduced dims kept as size 1.
Tensor keepdim(const OpGrad& n, const Tensor& r) { return r.reshape(kept_shape(n)); }
// The gradient of a reduction, expanded over the input.
Tensor unreduce(const OpGrad& n, const Tensor& g) { return keepdim(n, g).expand(to_ref(n.shape)); }

V sum_b(const OpGrad& n, const Tensor& g) { return {unreduce(n, g)}; }
V mean_b(const OpGrad& n, const Tensor& g) { return {unreduce(n, g) / static_cast<double>(n.ints[1])}; }

// max/min and amax/amin: the gradient goes to every element equal to the
// result, shared evenly between ties (PyTorch's amax rule).
V extreme_b(const OpGrad& n, const Tensor& g) {
  Tensor x = n.saved(0);
  Tensor hit = x.eq(keepdim(n, n.saved(1))).to(g.dtype());
  Tensor count = hit.sum(reduced_dims(n), true);
  return {unreduce(n, g) * hit / count};
}

// d prod / d x_i = product of the others: y / x_i without zeros; with one
// zero, only that element gets the product of the rest; with more, none does.
V prod_b(const OpGrad& n, const Tensor& g) {
  Tensor x = n.saved(0);
  const std::vector<int64_t> dims = reduced_dims(n);
  Tensor is_zero = x.eq(0);
  Tensor zeros_in_row = is_zero.to(kLong).sum(dims, true);
  Tensor safe_x = loom::where(is_zero, Scalar(1.0), x);
  Tensor others = safe_x;
  for (int64_t d : dims) others = others.prod(d, true);
  Tensor at_zero = loom::where(zeros_in_row.eq(1), others, Scalar(0.0));
  Tensor at_rest = loom::where(zeros_in_row.eq(0), others / safe_x, Scalar(0.0));
  return {unreduce(n, g) * loom::where(is_zero, at_zero, at_rest)};
}

V logsumexp_b(const OpGrad& n, const Tensor& g) {
  return {unreduce(n, g) * (n.saved(0) - keepdim(n, n.saved(1))).exp()};
}

// node.ints[0]: the softmax dim.
V softmax_b(const OpGrad& n, const Tensor& g) {
  Tensor y = n.saved(0);
  return {y * (g - (g * y).sum(n.ints[0], true))};
}
V log_softmax_b(const OpGrad& n, const Tensor& g) {
  return {g - n.saved(0).exp() * g.sum(n.ints[0], true)};
}

std::shared_ptr<OpGrad> attach_reduction(const char* name, Vjp vjp, const Tensor& x, uint64_t mask,
                                         const Tensor& out, const SourceLoc& loc) {
  auto n = attach(name, vjp, {&x}, out, loc);
  if (n) {
    n->shape = shape_of(x);
    n->ints.push_back(static_cast<int64_t>(mask));
  }
  return n;
}

bool reduces_all(const Tensor& x, uint64_t mask, const Tensor& out) {
  return out.dim() == 0 && (x.dim() == 0 || mask == (1ull << x.dim()) - 1);
}

}  // namespace

void reduce(ir::Op op, const char* name, const Tensor& x, uint64_t mask, const Tensor& out, const SourceLoc& loc) {
  if (!is_floating_point(out.dtype())) return;  // argmax, all, any, integer sums
  const bool all = reduces_all(x, mask, out);
  const std::string_view n = name;
  switch (op) {
    case Op::Sum: attach_reduction(all ? "SumBackward0" : "SumBackward1", sum_b, x, mask, out, loc); return;
    case Op::Prod:
      if (auto node = attach_reduction(all ? "ProdBackward0" : "ProdBackward1", prod_b, x, mask, out, loc))
        node->save(x);
      return;
    case Op::Max:
    case Op::Min: {
      const bool is_max = op == Op::Max;
      const char* rule = n == "amax" ? "AmaxBackward0" : n == "amin" ? "AminBackward0"
                         : all ? (is_max ? "MaxBackward1" : "MinBackward1") : (is_max ? "MaxBackward0" : "MinBackward0");
      if (auto node = attach_reduction(rule, extreme_b, x, mask, out, loc)) {
        node->save(x);
        node->save(out, true);
      }
      return;
    }
    default: throw_error(name, "has no gradient rule", loc);
  }
}

Tensor mean(const Tensor& x, uint64_t mask, Forward fwd, const SourceLoc& loc) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fwd();
  }
  auto n = attach_reduction(reduces_all(x, mask, out) ? "MeanBackward0" : "MeanBackward1", mean_b, x, mask, out, loc);
  int64_t count = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (mask >> d & 1) count *= x.size(d);
  if (n) n->ints.push_back(count);
  return out;
}

Tensor logsumexp(const Tensor& x, uint64_t mask, Forward fwd, const SourceLoc& loc) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fwd();
  }
  if (auto n = attach_reduction("LogsumexpBackward0", logsumexp_b, x, mask, out, loc)) {
    n->save(x);
    n->save(out, true);
  }
  return out;
}

Tensor softmax(const Tensor& x, int64_t dim, bool log, Forward fwd, const SourceLoc& loc) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fwd();
  }
  if (auto n = attach(log ? "LogSoftmaxBackward0" : "SoftmaxBackward0", log ? log_softmax_b : softmax_b, {&x}, out,
                      loc)) {
    n->ints.push_back(dim);
    n->save(out, true);
  }
  return out;
}

}  // namespace loom::detail::grad
