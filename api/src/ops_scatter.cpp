// The scatter family: scatter (assign, or the legacy reduce "add" /
// "multiply"), scatter_reduce (sum, prod, mean, amax, amin, include_self),
// index_add, index_fill, index_copy, and their in-place forms. Every one is
// a ScatterAdd or ScatterReduce node (ir/ops.def) or a composite of them,
// computed as PyTorch's kernels compute it:
// - include_self=false first writes the reduction's identity where src
//   lands (scatter_reduce_two's `self.scatter_(dim, index, init)`);
// - mean is the sum over the count of what landed (plus one for self),
//   a count of zero read as one, integers divided with floor;
// - duplicate indices with assign: PyTorch leaves the winner unspecified;
//   here the last in the index's row-major order wins on every backend.
// The in-place forms are copy_ of the out-of-place result (the way
// masked_fill_ is), so the version and view machinery is copy_'s.
#include <loom/functions.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <string>

#include "api/src/autograd/hooks.h"
#include "api/src/record.h"

namespace loom {

using detail::describe;
using detail::impl_of;

namespace {

// PyTorch counts a 0-dim tensor as 1-D for scatter's "same ndim" rule.
int64_t nonempty_dim(const Tensor& t) { return std::max<int64_t>(t.dim(), 1); }

// PyTorch's scatter_gather_dtype_check and scatter_shape_check; src may be
// null (a value scatter). Returns the wrapped dim.
int64_t check_scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor* src, const char* op,
                      const SourceLoc& loc) {
  impl_of(self, op, loc);
  impl_of(index, op, loc);
  detail::check_same_device(self, index, op, loc);
  LOOM_CHECK(index.dtype() == kLong, op, loc, "Expected dtype int64 for index, got ", describe(index));
  const int64_t d = detail::wrap_dim(dim, self.dim(), op, loc);
  LOOM_CHECK(nonempty_dim(index) == nonempty_dim(self), op, loc,
             "Index tensor must have the same number of dimensions as self tensor (", describe(index), " and ",
             describe(self), ")");
  if (src) {
    impl_of(*src, op, loc);
    detail::check_same_device(self, *src, op, loc);
    LOOM_CHECK(src->dtype() == self.dtype(), op, loc, "Expected self.dtype to be equal to src.dtype (",
               describe(self), " and ", describe(*src), ")");
    LOOM_CHECK(nonempty_dim(*src) == nonempty_dim(self), op, loc,
               "Index tensor must have the same number of dimensions as src tensor (", describe(index), " and ",
               describe(*src), ")");
  }
  for (int64_t k = 0; k < index.dim() && self.dim() > 0; ++k) {
    LOOM_CHECK(k == d || index.size(k) <= self.size(k), op, loc, "Expected index ", index.sizes(),
               " to be smaller than self ", self.sizes(), " apart from dimension ", d);
    if (src && src->dim() > 0)
      LOOM_CHECK(index.size(k) <= src->size(k), op, loc, "Expected index ", index.sizes(),
                 " to be smaller size than src ", src->sizes());
  }
  return d;
}

// One ScatterReduce node (no gradient: callers attach one rule to the
// composite). 0-dim operands are scattered as 1-element vectors.
Tensor scatter_node(const Tensor& self, int64_t d, const Tensor& index, const Tensor& src, ir::ScatterKind kind,
                    const SourceLoc& loc) {
  if (self.dim() == 0 || index.dim() == 0 || src.dim() == 0)
    return scatter_node(self.reshape({-1}, loc), 0, index.reshape({-1}, loc), src.reshape({-1}, loc), kind, loc)
        .view(self.sizes(), loc);
  auto n = detail::new_node(ir::Op::ScatterReduce, self.dtype(), self.device(), detail::shape_of(self),
                            {detail::read(self, loc), detail::read(index, loc), detail::read(src, loc)}, loc);
  n->attr.push_back(d);
  n->attr.push_back(static_cast<int64_t>(kind));
  return detail::wrap(std::move(n));
}

// A value scatter reads it as a src of the index's shape.
Tensor value_src(const Tensor& self, const Tensor& index, const Scalar& value, const SourceLoc& loc) {
  return full({}, value, TensorOptions(self.dtype()).device(self.device()), loc).expand(index.sizes(), loc);
}

using detail::grad::Reduce;

Reduce parse_reduce(std::string_view r, const char* op, const SourceLoc& loc) {
  if (r == "sum") return Reduce::Sum;
  if (r == "prod") return Reduce::Prod;
  if (r == "mean") return Reduce::Mean;
  if (r == "amax") return Reduce::Amax;
  if (r == "amin") return Reduce::Amin;
  LOOM_CHECK(false, op, loc, "reduce argument must be either sum, prod, mean, amax or amin, got ", std::string(r));
  return Reduce::Sum;
}

Reduce parse_legacy_reduce(std::string_view r, const char* op, const SourceLoc& loc) {
  if (r == "add") return Reduce::Sum;
  if (r == "multiply") return Reduce::Prod;
  LOOM_CHECK(false, op, loc, "reduce argument must be either add or multiply, got ", std::string(r));
  return Reduce::Sum;
}

// The value every element of src folds into when self is left out.
Scalar identity(Reduce r, ScalarType t) {
  const bool fp = is_floating_point(t);
  const double inf = std::numeric_limits<double>::infinity();
  switch (r) {
    case Reduce::Sum: case Reduce::Mean: case Reduce::Assign: return Scalar(int64_t{0});
    case Reduce::Prod: return Scalar(int64_t{1});
    case Reduce::Amax:
      if (t == kBool) return Scalar(false);
      if (fp) return Scalar(-inf);
      return t == kInt ? Scalar(int64_t{std::numeric_limits<int32_t>::min()}) : Scalar(std::numeric_limits<int64_t>::min());
    case Reduce::Amin:
      if (t == kBool) return Scalar(true);
      if (fp) return Scalar(inf);
      return t == kInt ? Scalar(int64_t{std::numeric_limits<int32_t>::max()}) : Scalar(std::numeric_limits<int64_t>::max());
  }
  return Scalar(int64_t{0});
}

// The forward of every scatter reduction, without gradients.
Tensor reduce_forward(const Tensor& self, int64_t d, const Tensor& index, const Tensor& src, Reduce r,
                      bool include_self, const SourceLoc& loc) {
  Tensor base = include_self ? self : scatter_node(self, d, index, value_src(self, index, identity(r, self.dtype()), loc),
                                                   ir::ScatterKind::Assign, loc);
  switch (r) {
    case Reduce::Assign: return scatter_node(base, d, index, src, ir::ScatterKind::Assign, loc);
    case Reduce::Prod: return scatter_node(base, d, index, src, ir::ScatterKind::Multiply, loc);
    case Reduce::Amax: return scatter_node(base, d, index, src, ir::ScatterKind::Max, loc);
    case Reduce::Amin: return scatter_node(base, d, index, src, ir::ScatterKind::Min, loc);
    case Reduce::Sum: return base.scatter_add(d, index, src, loc);
    case Reduce::Mean: {
      Tensor sum = base.scatter_add(d, index, src, loc);
      Tensor count = detail::grad::scatter_count(self, d, index, include_self, loc);
      if (is_floating_point(self.dtype())) return sum.div(count, loc);
      // floor(sum / count), count > 0: exact while |sum| < 2^53.
      Tensor whole = sum.sub(sum.remainder(count, loc), 1, loc);
      return whole.to(kDouble, loc).div(count.to(kDouble, loc), loc).round(loc).to(self.dtype(), loc);
    }
  }
  return base;
}

Tensor scatter_impl(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, Reduce r, bool include_self,
                    const char* op, const SourceLoc& loc) {
  const int64_t d = check_scatter(self, dim, index, &src, op, loc);
  LOOM_CHECK(!(r == Reduce::Mean && self.dtype() == kBool), op, loc, "mean is not implemented for ", describe(self));
  if (!detail::needs_grad(self, src)) return reduce_forward(self, d, index, src, r, include_self, loc);
  return detail::grad::scatter_reduce(self, d, index, src, r, include_self,
                                      [&] { return reduce_forward(self, d, index, src, r, include_self, loc); }, loc);
}

Tensor scatter_value(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value, Reduce r,
                     const char* op, const SourceLoc& loc) {
  const int64_t d = check_scatter(self, dim, index, nullptr, op, loc);
  return scatter_impl(self, d, index, value_src(self, index, value, loc), r, true, op, loc);
}

// The in-place form: the result copied into self. Under autograd self is
// read through a clone, so the values the rule saves survive the copy.
Tensor& into(Tensor& self, const std::function<Tensor(const Tensor&)>& f, const SourceLoc& loc) {
  const Tensor base = detail::needs_grad(self) ? self.clone(loc) : self;
  return self.copy_(f(base), loc);
}

// index_add / index_copy / index_fill: a 1-D index along dim as a scatter
// index of `shape` (the source's, or self's with dim resized).
Tensor spread_index(const Tensor& index, int64_t d, int64_t nd, IntArrayRef shape, const char* op,
                    const SourceLoc& loc) {
  LOOM_CHECK(index.dim() <= 1, op, loc, "Index is supposed to be a vector, got ", describe(index));
  if (nd == 0) return index.reshape({-1}, loc).to(kLong, loc);
  std::vector<int64_t> along(nd, 1);
  along[d] = -1;
  return index.reshape(along, loc).to(kLong, loc).expand(shape, loc);
}

// PyTorch's index_add/index_copy checks: source has self's shape but
// index.numel() along dim.
int64_t check_index_source(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, const char* op,
                           const SourceLoc& loc) {
  impl_of(self, op, loc);
  impl_of(index, op, loc);
  impl_of(source, op, loc);
  detail::check_same_device(self, index, op, loc);
  detail::check_same_device(self, source, op, loc);
  const int64_t d = detail::wrap_dim(dim, self.dim(), op, loc);
  LOOM_CHECK(index.dim() <= 1, op, loc, "Index is supposed to be a vector, got ", describe(index));
  LOOM_CHECK(index.dtype() == kLong || index.dtype() == kInt, op, loc, "Expected dtype int32/int64 for index, got ",
             describe(index));
  LOOM_CHECK(self.dtype() == source.dtype(), op, loc, "self (", describe(self), ") and source (", describe(source),
             ") must have the same scalar type");
  LOOM_CHECK(nonempty_dim(source) == nonempty_dim(self), op, loc,
             "source and self must have the same number of dimensions (", describe(source), " and ", describe(self), ")");
  const int64_t along = source.dim() == 0 ? 1 : source.size(d);
  LOOM_CHECK(index.numel() == along, op, loc, "Number of indices (", index.numel(),
             ") should be equal to source.size(dim) (", along, ")");
  for (int64_t k = 0; k < self.dim(); ++k)
    LOOM_CHECK(k == d || source.size(k) == self.size(k), op, loc, "source ", source.sizes(), " and self ",
               self.sizes(), " must match apart from dimension ", d);
  return d;
}

Tensor index_fill_impl(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& value, const SourceLoc& loc) {
  const char* op = "index_fill";
  impl_of(self, op, loc);
  impl_of(index, op, loc);
  impl_of(value, op, loc);
  detail::check_same_device(self, index, op, loc);
  LOOM_CHECK(index.dtype() == kLong, op, loc, "Expected dtype int64 for index, got ", describe(index));
  LOOM_CHECK(value.dim() == 0, op, loc, "only supports a 0-dimensional value tensor, got ", describe(value));
  const int64_t d = detail::wrap_dim(dim, self.dim(), op, loc);
  // index_fill wraps negative indices (PyTorch's index_fill kernel); one
  // below -size stays negative and fails the scatter's bounds check.
  const int64_t size = self.dim() == 0 ? 1 : self.size(d);
  Tensor idx = where(index.lt(0, loc), index.add(size, 1, loc), index, loc);
  std::vector<int64_t> shape = self.sizes().vec();
  if (!shape.empty()) shape[d] = index.numel();
  Tensor spread = spread_index(idx, d, self.dim(), shape, op, loc);
  Tensor mask = zeros(self.sizes(), TensorOptions(kBool).device(self.device()), loc);
  mask = scatter_node(mask, d, spread, value_src(mask, spread, true, loc), ir::ScatterKind::Assign, loc);
  return where(mask, value.to(self.dtype(), loc), self, loc);
}

}  // namespace

// ---------------------------------------------------------------- scatter
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, SourceLoc loc) {
  return scatter_impl(self, dim, index, src, Reduce::Assign, true, "scatter", loc);
}
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value, SourceLoc loc) {
  return scatter_value(self, dim, index, value, Reduce::Assign, "scatter", loc);
}
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce,
               SourceLoc loc) {
  return scatter_impl(self, dim, index, src, parse_legacy_reduce(reduce, "scatter", loc), true, "scatter", loc);
}
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value, std::string_view reduce,
               SourceLoc loc) {
  return scatter_value(self, dim, index, value, parse_legacy_reduce(reduce, "scatter", loc), "scatter", loc);
}
Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce,
                      bool include_self, SourceLoc loc) {
  return scatter_impl(self, dim, index, src, parse_reduce(reduce, "scatter_reduce", loc), include_self,
                      "scatter_reduce", loc);
}

Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Tensor& src, SourceLoc loc) const {
  return loom::scatter(*this, dim, index, src, loc);
}
Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Scalar& value, SourceLoc loc) const {
  return loom::scatter(*this, dim, index, value, loc);
}
Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce,
                       SourceLoc loc) const {
  return loom::scatter(*this, dim, index, src, reduce, loc);
}
Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Scalar& value, std::string_view reduce,
                       SourceLoc loc) const {
  return loom::scatter(*this, dim, index, value, reduce, loc);
}
Tensor Tensor::scatter_reduce(int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce,
                              bool include_self, SourceLoc loc) const {
  return loom::scatter_reduce(*this, dim, index, src, reduce, include_self, loc);
}

Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src, SourceLoc loc) {
  return into(*this, [&](const Tensor& b) { return loom::scatter(b, dim, index, src, loc); }, loc);
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Scalar& value, SourceLoc loc) {
  return into(*this, [&](const Tensor& b) { return loom::scatter(b, dim, index, value, loc); }, loc);
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce, SourceLoc loc) {
  return into(*this, [&](const Tensor& b) { return loom::scatter(b, dim, index, src, reduce, loc); }, loc);
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Scalar& value, std::string_view reduce,
                         SourceLoc loc) {
  return into(*this, [&](const Tensor& b) { return loom::scatter(b, dim, index, value, reduce, loc); }, loc);
}
Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src, SourceLoc loc) {
  return into(*this, [&](const Tensor& b) { return loom::scatter_add(b, dim, index, src, loc); }, loc);
}
Tensor& Tensor::scatter_reduce_(int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce,
                                bool include_self, SourceLoc loc) {
  return into(*this, [&](const Tensor& b) { return loom::scatter_reduce(b, dim, index, src, reduce, include_self, loc); },
              loc);
}

// ---------------------------------------------------------------- index_*
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha,
                 SourceLoc loc) {
  const int64_t d = check_index_source(self, dim, index, source, "index_add", loc);
  Tensor idx = spread_index(index, d, self.dim(), source.sizes(), "index_add", loc);
  const bool one = alpha.toDouble() == 1.0;
  return scatter_add(self, d, idx, one ? source : source.mul(alpha, loc).to(self.dtype(), loc), loc);
}
Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, SourceLoc loc) {
  const int64_t d = check_index_source(self, dim, index, source, "index_copy", loc);
  Tensor idx = spread_index(index, d, self.dim(), source.sizes(), "index_copy", loc);
  return scatter_impl(self, d, idx, source, Reduce::Assign, true, "index_copy", loc);
}
Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, const Scalar& value, SourceLoc loc) {
  impl_of(self, "index_fill", loc);
  return index_fill_impl(self, dim, index, scalar_tensor(value, TensorOptions(self.dtype()).device(self.device()), loc),
                         loc);
}
Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& value, SourceLoc loc) {
  return index_fill_impl(self, dim, index, value, loc);
}

Tensor Tensor::index_add(int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha,
                         SourceLoc loc) const {
  return loom::index_add(*this, dim, index, source, alpha, loc);
}
Tensor Tensor::index_copy(int64_t dim, const Tensor& index, const Tensor& source, SourceLoc loc) const {
  return loom::index_copy(*this, dim, index, source, loc);
}
Tensor Tensor::index_fill(int64_t dim, const Tensor& index, const Scalar& value, SourceLoc loc) const {
  return loom::index_fill(*this, dim, index, value, loc);
}
Tensor Tensor::index_fill(int64_t dim, const Tensor& index, const Tensor& value, SourceLoc loc) const {
  return loom::index_fill(*this, dim, index, value, loc);
}
Tensor& Tensor::index_add_(int64_t dim, const Tensor& index, const Tensor& source, const Scalar& alpha, SourceLoc loc) {
  return into(*this, [&](const Tensor& b) { return loom::index_add(b, dim, index, source, alpha, loc); }, loc);
}
Tensor& Tensor::index_copy_(int64_t dim, const Tensor& index, const Tensor& source, SourceLoc loc) {
  return into(*this, [&](const Tensor& b) { return loom::index_copy(b, dim, index, source, loc); }, loc);
}
Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, const Scalar& value, SourceLoc loc) {
  return into(*this, [&](const Tensor& b) { return loom::index_fill(b, dim, index, value, loc); }, loc);
}
Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, const Tensor& value, SourceLoc loc) {
  return into(*this, [&](const Tensor& b) { return loom::index_fill(b, dim, index, value, loc); }, loc);
}

}  // namespace loom
