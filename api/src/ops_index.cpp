// Joins (cat, stack), indexing (index_select, gather, scatter_add: one Move
// node each) and the composites built on them: embedding and one_hot are
// row lookups (so a bad index fails the same bounds check), softmax and
// log_softmax are max-shifted reductions, tril/triu are where-masks.
#include <loom/functions.h>

#include <algorithm>
#include <vector>

#include "api/src/autograd/hooks.h"
#include "api/src/autocast.h"
#include "api/src/record.h"

namespace loom {

using detail::describe;
using detail::impl_of;
using detail::wrap_dim;

namespace {

// PyTorch's legacy rule: a 1-D empty tensor joins anything and contributes nothing.
bool skipped_in_cat(const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

Tensor cat_impl(const std::vector<Tensor>& ts, int64_t dim, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(!ts.empty(), op, loc, "expected a non-empty list of Tensors");
  const Tensor* ref = nullptr;
  ScalarType dt = impl_of(ts[0], op, loc).storage->dtype;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    impl_of(t, op, loc);
    LOOM_CHECK(t.dim() > 0, op, loc, "zero-dimensional tensor (at position ", i, ") cannot be concatenated");
    detail::check_same_device(ts[0], t, op, loc);
    dt = promote_types(dt, t.dtype());
    if (!ref && !skipped_in_cat(t)) ref = &t;
  }
  if (!ref) ref = &ts[0];
  const int64_t nd = ref->dim();
  const int64_t d = wrap_dim(dim, nd, op, loc);
  ir::Dims shape = detail::shape_of(*ref);
  shape[d] = 0;
  std::vector<ir::NodePtr> inputs;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (&t != ref && skipped_in_cat(t)) continue;
    LOOM_CHECK(t.dim() == nd, op, loc, "Tensors must have same number of dimensions: got ", nd, " and ", t.dim(),
               " (", describe(*ref), " and tensor number ", i, ": ", describe(t), ")");
    for (int64_t k = 0; k < nd; ++k)
      LOOM_CHECK(k == d || t.size(k) == ref->size(k), op, loc, "Sizes of tensors must match except in dimension ", d,
                 ". Expected size ", ref->size(k), " but got size ", t.size(k), " for tensor number ", i,
                 " in the list (", describe(*ref), " and ", describe(t), ")");
    shape[d] += t.size(d);
    inputs.push_back(detail::read_as(t, dt, loc));
  }
  auto n = detail::new_node(ir::Op::Concat, dt, ref->device(), shape, std::move(inputs), loc);
  n->attr.push_back(d);
  Tensor out = detail::wrap(std::move(n));
  if (detail::grad_mode()) [[likely]] detail::grad::cat(ts, d, out, loc);
  return out;
}

Tensor index_select_impl(const Tensor& x, int64_t dim, const Tensor& index, const char* op, const SourceLoc& loc) {
  impl_of(x, op, loc);
  impl_of(index, op, loc);
  detail::check_same_device(x, index, op, loc);
  LOOM_CHECK(index.dim() <= 1, op, loc, "index is supposed to be a vector (0-D or 1-D), got ", describe(index));
  LOOM_CHECK(index.dtype() == kLong || index.dtype() == kInt, op, loc, "expected dtype int32/int64 for index, got ",
             describe(index));
  const int64_t d = wrap_dim(dim, x.dim(), op, loc);
  if (x.dim() == 0) {
    LOOM_CHECK(index.numel() == 1, op, loc, "index to scalar can have only 1 value, got ", index.numel(), " value(s)");
    return index_select_impl(x.reshape({1}, loc), 0, index, op, loc).reshape(std::vector<int64_t>{}, loc);
  }
  ir::Dims shape = detail::shape_of(x);
  shape[d] = index.numel();
  auto n = detail::new_node(ir::Op::IndexSelect, x.dtype(), x.device(), shape,
                            {detail::read(x, loc), detail::read_as(index.reshape({-1}, loc), kLong, loc)}, loc);
  n->attr.push_back(d);
  Tensor out = detail::wrap(std::move(n));
  if (detail::needs_grad(x)) [[unlikely]] detail::grad::index_select(x, d, index, out, loc);
  return out;
}

void check_index_dtype(const Tensor& index, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(index.dtype() == kLong, op, loc, "expected dtype int64 for index, got ", describe(index));
}

// PyTorch counts a 0-dim tensor as 1-D for gather/scatter's "same ndim" rule.
int64_t nonempty_dim(const Tensor& t) { return std::max<int64_t>(t.dim(), 1); }

Tensor softmax_impl(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype, bool log, const char* op,
                    const SourceLoc& loc) {
  impl_of(x, op, loc);
  Tensor y = dtype ? x.to(*dtype, loc) : detail::autocast::to_float(x, loc);
  LOOM_CHECK(is_floating_point(y.dtype()), op, loc, "expected a floating-point tensor, got ", describe(y),
             dtype ? "" : " (pass dtype=kFloat to convert it first)");
  const int64_t d = wrap_dim(dim, y.dim(), op, loc);
  if (y.numel() == 0) return y.clone(loc);
  if (is_reduced_floating_point(y.dtype()))  // computed in float32, rounded once (PyTorch's acc_type)
    return softmax_impl(y.to(kFloat, loc), d, std::nullopt, log, op, loc).to(y.dtype(), loc);
  if (detail::needs_grad(y)) [[unlikely]]
    return detail::grad::softmax(y, d, log, [&] { return softmax_impl(y, d, std::nullopt, log, op, loc); }, loc);
  // Shifting by the row max keeps exp() from overflowing; rows of all -inf
  // give NaN, as they do in PyTorch.
  Tensor shifted = y.sub(y.amax(d, true, loc), 1, loc);
  Tensor e = shifted.exp(loc);
  Tensor s = e.sum(d, true, std::nullopt, loc);
  // One reciprocal per row and a multiply per element, as ATen's CPU kernel
  // does: a division per element held the FP divider for a fifth of W2 on
  // Zen 3; x * (1/s) is within 1.5 ulp of x / s.
  return log ? shifted.sub(s.log(loc), 1, loc) : e.mul(s.reciprocal(loc), loc);
}

Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op, const SourceLoc& loc) {
  impl_of(x, op, loc);
  LOOM_CHECK(x.dim() >= 2, op, loc, "input tensor must have at least 2 dimensions, got ", describe(x));
  const TensorOptions idx = TensorOptions(kLong).device(x.device());
  // col - row of every element of the last two dims; broadcasts over the batch.
  Tensor offset = arange(x.size(-1), idx, loc).sub(arange(x.size(-2), idx, loc).unsqueeze(1, loc), 1, loc);
  Tensor keep = lower ? offset.le(diagonal, loc) : offset.ge(diagonal, loc);
  return where(keep, x, scalar_tensor(0, TensorOptions(x.dtype()).device(x.device()), loc), loc);
}

std::vector<int64_t> with_last(IntArrayRef sizes, int64_t last, const char* op, const SourceLoc& loc) {
  std::vector<int64_t> out = sizes.vec();
  out.push_back(last);
  LOOM_CHECK(out.size() <= static_cast<size_t>(ir::kMaxDims), op, loc, "the result would have ", out.size(),
             " dims (at most ", ir::kMaxDims, " are supported)");
  return out;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim, SourceLoc loc) { return cat_impl(tensors, dim, "cat", loc); }

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim, SourceLoc loc) {
  LOOM_CHECK(!tensors.empty(), "stack", loc, "expects a non-empty TensorList");
  for (size_t i = 0; i < tensors.size(); ++i) {
    impl_of(tensors[i], "stack", loc);
    LOOM_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack", loc, "stack expects each tensor to be equal size, but got ",
               tensors[0].sizes(), " at entry 0 and ", tensors[i].sizes(), " at entry ", i);
  }
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack", loc);
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(d, loc));
  return cat_impl(parts, d, "stack", loc);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, SourceLoc loc) {
  return index_select_impl(x, dim, index, "index_select", loc);
}
Tensor Tensor::index_select(int64_t dim, const Tensor& index, SourceLoc loc) const {
  return index_select_impl(*this, dim, index, "index_select", loc);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, SourceLoc loc) {
  impl_of(x, "gather", loc);
  impl_of(index, "gather", loc);
  detail::check_same_device(x, index, "gather", loc);
  check_index_dtype(index, "gather", loc);
  LOOM_CHECK(nonempty_dim(index) == nonempty_dim(x), "gather", loc,
             "index tensor must have the same number of dimensions as input tensor (", describe(index), " and ",
             describe(x), ")");
  const int64_t d = wrap_dim(dim, x.dim(), "gather", loc);
  if (x.dim() == 0 || index.dim() == 0)
    return gather(x.reshape({-1}, loc), 0, index.reshape({-1}, loc), loc).view(index.sizes(), loc);
  for (int64_t k = 0; k < x.dim(); ++k)
    LOOM_CHECK(k == d || index.size(k) <= x.size(k), "gather", loc, "Size does not match at dimension ", k,
               " expected index ", index.sizes(), " to be smaller than self ", x.sizes(), " apart from dimension ", d);
  auto n = detail::new_node(ir::Op::Gather, x.dtype(), x.device(), detail::shape_of(index),
                            {detail::read(x, loc), detail::read(index, loc)}, loc);
  n->attr.push_back(d);
  Tensor out = detail::wrap(std::move(n));
  if (detail::needs_grad(x)) [[unlikely]] detail::grad::gather(x, d, index, out, loc);
  return out;
}
Tensor Tensor::gather(int64_t dim, const Tensor& index, SourceLoc loc) const { return loom::gather(*this, dim, index, loc); }

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, SourceLoc loc) {
  impl_of(x, "scatter_add", loc);
  impl_of(index, "scatter_add", loc);
  impl_of(src, "scatter_add", loc);
  detail::check_same_device(x, index, "scatter_add", loc);
  detail::check_same_device(x, src, "scatter_add", loc);
  check_index_dtype(index, "scatter_add", loc);
  LOOM_CHECK(src.dtype() == x.dtype(), "scatter_add", loc, "expected self.dtype to be equal to src.dtype (",
             describe(x), " and ", describe(src), ")");
  LOOM_CHECK(nonempty_dim(index) == nonempty_dim(x) && nonempty_dim(src) == nonempty_dim(x), "scatter_add", loc,
             "index and src must have the same number of dimensions as self (self ", describe(x), ", index ",
             describe(index), ", src ", describe(src), ")");
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add", loc);
  if (x.dim() == 0 || index.dim() == 0 || src.dim() == 0)
    return scatter_add(x.reshape({-1}, loc), 0, index.reshape({-1}, loc), src.reshape({-1}, loc), loc).view(x.sizes(), loc);
  for (int64_t k = 0; k < x.dim(); ++k)
    LOOM_CHECK(index.size(k) <= src.size(k) && (k == d || index.size(k) <= x.size(k)), "scatter_add", loc,
               "Expected index ", index.sizes(), " to be smaller than self ", x.sizes(), " apart from dimension ", d,
               " and to be smaller size than src ", src.sizes());
  auto n = detail::new_node(ir::Op::ScatterAdd, x.dtype(), x.device(), detail::shape_of(x),
                            {detail::read(x, loc), detail::read(index, loc), detail::read(src, loc)}, loc);
  n->attr.push_back(d);
  Tensor out = detail::wrap(std::move(n));
  if (detail::needs_grad(x, src)) [[unlikely]] detail::grad::scatter_add(x, d, index, src, out, loc);
  return out;
}
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src, SourceLoc loc) const {
  return loom::scatter_add(*this, dim, index, src, loc);
}

Tensor embedding(const Tensor& weight, const Tensor& indices, SourceLoc loc) {
  impl_of(weight, "embedding", loc);
  impl_of(indices, "embedding", loc);
  LOOM_CHECK(weight.dim() == 2, "embedding", loc, "'weight' must be 2-D, got ", describe(weight));
  LOOM_CHECK(indices.dtype() == kLong || indices.dtype() == kInt, "embedding", loc,
             "expected indices of dtype Long or Int, got ", describe(indices));
  std::vector<int64_t> out = with_last(indices.sizes(), weight.size(1), "embedding", loc);
  return index_select_impl(weight, 0, indices.reshape({-1}, loc), "embedding", loc).view(out, loc);
}

Tensor softmax(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype, SourceLoc loc) {
  return softmax_impl(x, dim, dtype, false, "softmax", loc);
}
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype, SourceLoc loc) {
  return softmax_impl(x, dim, dtype, true, "log_softmax", loc);
}
Tensor Tensor::softmax(int64_t dim, std::optional<ScalarType> dtype, SourceLoc loc) const {
  return softmax_impl(*this, dim, dtype, false, "softmax", loc);
}
Tensor Tensor::log_softmax(int64_t dim, std::optional<ScalarType> dtype, SourceLoc loc) const {
  return softmax_impl(*this, dim, dtype, true, "log_softmax", loc);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes, SourceLoc loc) {
  impl_of(indices, "one_hot", loc);
  LOOM_CHECK(indices.dtype() == kLong, "one_hot", loc, "one_hot is only applicable to index tensor of type Long, got ",
             describe(indices));
  LOOM_CHECK(num_classes >= -1, "one_hot", loc, "num_classes must be -1 (infer) or non-negative, got ", num_classes);
  if (num_classes == -1) {
    LOOM_CHECK(indices.numel() > 0, "one_hot", loc, "can not infer total number of classes from empty tensor");
    Tensor lo = indices.amin({}, false, loc), hi = indices.amax({}, false, loc);
    LOOM_CHECK(lo.item<int64_t>(loc) >= 0, "one_hot", loc, "class values must be non-negative, got ", lo.item<int64_t>(loc));
    num_classes = hi.item<int64_t>(loc) + 1;
  }
  std::vector<int64_t> out = with_last(indices.sizes(), num_classes, "one_hot", loc);
  // Rows of the identity, so a class value outside [0, num_classes) fails
  // index_select's bounds check at materialization instead of giving zeros.
  Tensor table = eye(num_classes, TensorOptions(kLong).device(indices.device()), loc);
  return index_select_impl(table, 0, indices.reshape({-1}, loc), "one_hot", loc).view(out, loc);
}

Tensor tril(const Tensor& x, int64_t diagonal, SourceLoc loc) { return triangle(x, diagonal, true, "tril", loc); }
Tensor triu(const Tensor& x, int64_t diagonal, SourceLoc loc) { return triangle(x, diagonal, false, "triu", loc); }
Tensor Tensor::tril(int64_t diagonal, SourceLoc loc) const { return triangle(*this, diagonal, true, "tril", loc); }
Tensor Tensor::triu(int64_t diagonal, SourceLoc loc) const { return triangle(*this, diagonal, false, "triu", loc); }

}  // namespace loom
