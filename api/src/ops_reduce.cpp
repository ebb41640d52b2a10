// Reductions: the dims rule (wrap, dedupe, keepdim), the dtype rule (sums of
// integers are int64, means need floating point), and composites (mean, var,
// std, logsumexp, norm) built from the primitive Reduce nodes.
#include <loom/functions.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "api/src/autograd/hooks.h"
#include "api/src/autocast.h"
#include "api/src/record.h"

namespace loom {

using detail::impl_of;

namespace {

// Bit mask of the reduced dims; empty `dims` means all of them.
uint64_t dim_mask(const Tensor& x, IntArrayRef dims, const char* op, const SourceLoc& loc) {
  const int64_t nd = x.dim();
  if (dims.empty()) return nd == 0 ? 0 : (1ull << nd) - 1;
  uint64_t mask = 0;
  for (int64_t d : dims) {
    int64_t w = detail::wrap_dim(d, nd, op, loc);
    LOOM_CHECK(!(mask >> w & 1), op, loc, "dim ", w, " appears multiple times in the list of dims ", dims);
    if (nd > 0) mask |= 1ull << w;
  }
  return mask;
}

// The keepdim result `r` viewed without the reduced dims.
Tensor drop_dims(const Tensor& r, uint64_t mask, const SourceLoc& loc) {
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < r.dim(); ++d)
    if (!(mask >> d & 1)) kept.push_back(r.size(d));
  return r.view(kept, loc);
}

// Records a primitive reduction; the result drops the reduced dims unless keepdim.
Tensor reduce(ir::Op op, const char* name, const Tensor& x, uint64_t mask, bool keepdim, ScalarType in_dt,
              ScalarType out_dt, const SourceLoc& loc) {
  ir::Dims keep = detail::shape_of(x);
  for (size_t d = 0; d < keep.n; ++d)
    if (mask >> d & 1) keep[d] = 1;
  auto n = detail::new_node(op, out_dt, x.device(), keep, {detail::read_as(x, in_dt, loc)}, loc);
  n->attr.push_back(static_cast<int64_t>(mask));
  Tensor r = detail::wrap(std::move(n));
  if (!keepdim) r = drop_dims(r, mask, loc);
  detail::grad::on_reduce(op, name, x, mask, r, loc);
  return r;
}

int64_t reduced_count(const Tensor& x, uint64_t mask) {
  int64_t c = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (mask >> d & 1) c *= x.size(d);
  return c;
}

// Max, min and their args have no identity: each output needs an element.
// (Reducing a non-empty dim of an otherwise empty tensor is fine.)
void check_nonempty(const Tensor& x, uint64_t mask, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(reduced_count(x, mask) > 0, op, loc, "cannot perform reduction function ", op, " on tensor ",
             detail::describe(x), " with no elements because the operation does not have an identity");
}

void check_not_bool(const Tensor& x, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(x.dtype() != kBool, op, loc, "does not support bool input (", detail::describe(x), ")");
}

void check_float(const Tensor& x, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(is_floating_point(x.dtype()), op, loc, "could not infer output dtype: input dtype must be floating point, got ",
             detail::describe(x));
}

ScalarType sum_dtype(ScalarType t) { return is_floating_point(t) ? t : kLong; }

}  // namespace

Tensor Tensor::sum(SourceLoc loc) const { return sum({}, false, std::nullopt, loc); }
Tensor Tensor::sum(IntArrayRef dims, bool keepdim, std::optional<ScalarType> dtype, SourceLoc loc) const {
  impl_of(*this, "sum", loc);
  if (!dtype && detail::autocast::wants_float(*this)) return to(kFloat, loc).sum(dims, keepdim, dtype, loc);
  ScalarType dt = dtype.value_or(sum_dtype(this->dtype()));
  LOOM_CHECK(dt != kBool, "sum", loc, "a sum cannot have dtype Bool");
  return reduce(ir::Op::Sum, "sum", *this, dim_mask(*this, dims, "sum", loc), keepdim, dt, dt, loc);
}
Tensor sum(const Tensor& x, SourceLoc loc) { return x.sum(loc); }
Tensor sum(const Tensor& x, IntArrayRef dims, bool keepdim, SourceLoc loc) { return x.sum(dims, keepdim, std::nullopt, loc); }

Tensor Tensor::mean(SourceLoc loc) const { return mean({}, false, loc); }
Tensor Tensor::mean(IntArrayRef dims, bool keepdim, SourceLoc loc) const {
  impl_of(*this, "mean", loc);
  check_float(*this, "mean", loc);
  if (is_reduced_floating_point(dtype())) return to(kFloat, loc).mean(dims, keepdim, loc).to(dtype(), loc);  // float32 inside
  uint64_t mask = dim_mask(*this, dims, "mean", loc);
  if (detail::needs_grad(*this)) [[unlikely]]
    return detail::grad::mean(*this, mask, [&] { return mean(dims, keepdim, loc); }, loc);
  Tensor s = reduce(ir::Op::Sum, "mean", *this, mask, keepdim, dtype(), dtype(), loc);
  return s.div(static_cast<double>(reduced_count(*this, mask)), loc);
}
Tensor mean(const Tensor& x, SourceLoc loc) { return x.mean(loc); }
Tensor mean(const Tensor& x, IntArrayRef dims, bool keepdim, SourceLoc loc) { return x.mean(dims, keepdim, loc); }

Tensor Tensor::prod(SourceLoc loc) const {
  impl_of(*this, "prod", loc);
  if (detail::autocast::wants_float(*this)) return to(kFloat, loc).prod(loc);
  ScalarType dt = sum_dtype(dtype());
  return reduce(ir::Op::Prod, "prod", *this, dim_mask(*this, {}, "prod", loc), false, dt, dt, loc);
}
Tensor Tensor::prod(int64_t dim, bool keepdim, SourceLoc loc) const {
  impl_of(*this, "prod", loc);
  if (detail::autocast::wants_float(*this)) return to(kFloat, loc).prod(dim, keepdim, loc);
  ScalarType dt = sum_dtype(dtype());
  return reduce(ir::Op::Prod, "prod", *this, dim_mask(*this, dim, "prod", loc), keepdim, dt, dt, loc);
}

namespace {
// Max / Min (and with `arg`, their indices) over the dims, named `name` in errors.
Tensor extreme(ir::Op op, const char* name, const Tensor& x, IntArrayRef dims, bool keepdim, const SourceLoc& loc) {
  impl_of(x, name, loc);
  uint64_t mask = dim_mask(x, dims, name, loc);
  check_nonempty(x, mask, name, loc);
  const bool arg = op == ir::Op::ArgMax || op == ir::Op::ArgMin;
  return reduce(op, name, x, mask, keepdim, x.dtype(), arg ? kLong : x.dtype(), loc);
}
}  // namespace

Tensor Tensor::amax(IntArrayRef dims, bool keepdim, SourceLoc loc) const {
  return extreme(ir::Op::Max, "amax", *this, dims, keepdim, loc);
}
Tensor Tensor::amin(IntArrayRef dims, bool keepdim, SourceLoc loc) const {
  return extreme(ir::Op::Min, "amin", *this, dims, keepdim, loc);
}
Tensor Tensor::max(SourceLoc loc) const { return extreme(ir::Op::Max, "max", *this, {}, false, loc); }
Tensor Tensor::min(SourceLoc loc) const { return extreme(ir::Op::Min, "min", *this, {}, false, loc); }

Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim, SourceLoc loc) const {
  impl_of(*this, "argmax", loc);
  check_not_bool(*this, "argmax", loc);
  if (!dim) {
    check_nonempty(*this, dim_mask(*this, {}, "argmax", loc), "argmax", loc);
    Tensor r = reshape({-1}, loc).argmax(0, false, loc);
    if (!keepdim) return r;
    return r.reshape(std::vector<int64_t>(this->dim(), 1), loc);
  }
  return extreme(ir::Op::ArgMax, "argmax", *this, *dim, keepdim, loc);
}
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim, SourceLoc loc) const {
  impl_of(*this, "argmin", loc);
  check_not_bool(*this, "argmin", loc);
  if (!dim) {
    check_nonempty(*this, dim_mask(*this, {}, "argmin", loc), "argmin", loc);
    Tensor r = reshape({-1}, loc).argmin(0, false, loc);
    if (!keepdim) return r;
    return r.reshape(std::vector<int64_t>(this->dim(), 1), loc);
  }
  return extreme(ir::Op::ArgMin, "argmin", *this, *dim, keepdim, loc);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim, SourceLoc loc) { return x.argmax(dim, keepdim, loc); }
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim, SourceLoc loc) { return x.argmin(dim, keepdim, loc); }

// (values, indices); bool tensors are accepted here, unlike by argmax.
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim, SourceLoc loc) const {
  Tensor values = extreme(ir::Op::Max, "max", *this, dim, keepdim, loc);
  return {values, extreme(ir::Op::ArgMax, "max", *this, dim, keepdim, loc)};
}
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim, SourceLoc loc) const {
  Tensor values = extreme(ir::Op::Min, "min", *this, dim, keepdim, loc);
  return {values, extreme(ir::Op::ArgMin, "min", *this, dim, keepdim, loc)};
}

Tensor Tensor::var_all(bool unbiased, SourceLoc loc) const { return var(IntArrayRef{}, unbiased, false, loc); }
Tensor Tensor::var(IntArrayRef dims, bool unbiased, bool keepdim, SourceLoc loc) const {
  impl_of(*this, "var", loc);
  check_float(*this, "var", loc);
  if (is_reduced_floating_point(dtype())) return to(kFloat, loc).var(dims, unbiased, keepdim, loc).to(dtype(), loc);  // float32 inside
  uint64_t mask = dim_mask(*this, dims, "var", loc);
  const int64_t n = reduced_count(*this, mask);
  Tensor centered = sub(reduce(ir::Op::Sum, "var", *this, mask, true, dtype(), dtype(), loc).div(static_cast<double>(n), loc), 1, loc);
  Tensor ss = reduce(ir::Op::Sum, "var", centered.mul(centered, loc), mask, keepdim, dtype(), dtype(), loc);
  // As PyTorch: divide by max(0, n - correction), so n <= correction gives nan (or inf).
  return ss.div(static_cast<double>(std::max<int64_t>(0, n - (unbiased ? 1 : 0))), loc);
}
Tensor Tensor::std(IntArrayRef dims, bool unbiased, bool keepdim, SourceLoc loc) const {
  return var(dims, unbiased, keepdim, loc).sqrt(loc);
}

Tensor Tensor::logsumexp(IntArrayRef dims, bool keepdim, SourceLoc loc) const {
  impl_of(*this, "logsumexp", loc);
  if (detail::autocast::wants_float(*this)) return to(kFloat, loc).logsumexp(dims, keepdim, loc);
  if (is_reduced_floating_point(dtype())) return to(kFloat, loc).logsumexp(dims, keepdim, loc).to(dtype(), loc);  // float32 inside
  Tensor x = is_floating_point() ? *this : to(kFloat, loc);
  uint64_t mask = dim_mask(x, dims, "logsumexp", loc);
  if (detail::needs_grad(x)) [[unlikely]]
    return detail::grad::logsumexp(x, mask, [&] { return x.logsumexp(dims, keepdim, loc); }, loc);
  if (x.numel() == 0) return x.exp(loc).sum(dims, keepdim, std::nullopt, loc).log(loc);
  Tensor m = reduce(ir::Op::Max, "logsumexp", x, mask, true, x.dtype(), x.dtype(), loc);
  // Rows of -inf (or +inf) would give inf - inf: shift by 0 there instead.
  Tensor shift = loom::where(m.abs(loc).eq(std::numeric_limits<double>::infinity(), loc), Scalar(0.0), m, loc);
  Tensor s = reduce(ir::Op::Sum, "logsumexp", x.sub(shift, 1, loc).exp(loc), mask, true, x.dtype(), x.dtype(), loc);
  Tensor r = s.log(loc).add(shift, 1, loc);
  return keepdim ? r : drop_dims(r, mask, loc);
}
Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim, SourceLoc loc) { return x.logsumexp(dims, keepdim, loc); }

Tensor Tensor::all(SourceLoc loc) const {
  impl_of(*this, "all", loc);
  return reduce(ir::Op::All, "all", *this, dim_mask(*this, {}, "all", loc), false, kBool, kBool, loc);
}
Tensor Tensor::all(int64_t dim, bool keepdim, SourceLoc loc) const {
  impl_of(*this, "all", loc);
  return reduce(ir::Op::All, "all", *this, dim_mask(*this, dim, "all", loc), keepdim, kBool, kBool, loc);
}
Tensor Tensor::any(SourceLoc loc) const {
  impl_of(*this, "any", loc);
  return reduce(ir::Op::Any, "any", *this, dim_mask(*this, {}, "any", loc), false, kBool, kBool, loc);
}
Tensor Tensor::any(int64_t dim, bool keepdim, SourceLoc loc) const {
  impl_of(*this, "any", loc);
  return reduce(ir::Op::Any, "any", *this, dim_mask(*this, dim, "any", loc), keepdim, kBool, kBool, loc);
}

Tensor Tensor::norm(const Scalar& p, SourceLoc loc) const { return norm(p, {}, false, loc); }
Tensor Tensor::norm(const Scalar& p, IntArrayRef dims, bool keepdim, SourceLoc loc) const {
  impl_of(*this, "norm", loc);
  check_float(*this, "norm", loc);
  const double pv = p.toDouble();
  Tensor a = abs(loc);
  if (std::isinf(pv)) return pv > 0 ? a.amax(dims, keepdim, loc) : a.amin(dims, keepdim, loc);
  if (pv == 0) return ne(0, loc).to(dtype(), loc).sum(dims, keepdim, std::nullopt, loc);
  if (pv == 1) return a.sum(dims, keepdim, std::nullopt, loc);
  if (pv == 2) return mul(*this, loc).sum(dims, keepdim, std::nullopt, loc).sqrt(loc);
  return a.pow(pv, loc).sum(dims, keepdim, std::nullopt, loc).pow(1.0 / pv, loc);
}

}  // namespace loom
