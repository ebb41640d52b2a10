// Ops built from other ops, as PyTorch defines them: repeat (expand and
// reshape), flip (index_select of a reversed range), roll (two slices
// joined), masked_fill (where), isnan/isinf/isfinite (comparisons), clamp
// with tensor bounds (maximum, minimum), outer, diag and diagonal (views),
// baddbmm. Their gradients are those of the ops they are made of.
#include <loom/functions.h>
#include <loom/tensor.h>

#include <limits>

#include "api/src/autocast.h"
#include "api/src/record.h"

namespace loom {

using detail::describe;
using detail::wrap_dim;

Tensor Tensor::repeat(IntArrayRef repeats, SourceLoc loc) const {
  detail::impl_of(*this, "repeat", loc);
  LOOM_CHECK(static_cast<int64_t>(repeats.size()) >= dim(), "repeat", loc,
             "number of dimensions of repeat dims can not be smaller than number of dimensions of tensor: ",
             IntArrayRef(repeats), " for ", describe(*this));
  // Leading new dims of size 1, then each dim d as [r_d, n_d] expanded, merged.
  const size_t extra = repeats.size() - static_cast<size_t>(dim());
  std::vector<int64_t> padded(extra, 1), interleaved, expanded, merged;
  for (int64_t s : sizes()) padded.push_back(s);
  for (size_t d = 0; d < repeats.size(); ++d) {
    LOOM_CHECK(repeats[d] >= 0, "repeat", loc, "repeats must be non-negative, got ", IntArrayRef(repeats));
    interleaved.push_back(1), interleaved.push_back(padded[d]);
    expanded.push_back(repeats[d]), expanded.push_back(padded[d]);
    merged.push_back(repeats[d] * padded[d]);
  }
  return reshape(interleaved, loc).expand(expanded, loc).reshape(merged, loc);
}

Tensor Tensor::repeat_interleave(int64_t repeats, std::optional<int64_t> dim_opt, SourceLoc loc) const {
  detail::impl_of(*this, "repeat_interleave", loc);
  LOOM_CHECK(repeats >= 0, "repeat_interleave", loc, "repeats must be non-negative, got ", repeats);
  if (!dim_opt) return flatten(0, -1, loc).repeat_interleave(repeats, 0, loc);
  const int64_t d = wrap_dim(*dim_opt, dim(), "repeat_interleave", loc);
  std::vector<int64_t> expanded = sizes().vec(), merged = sizes().vec();
  expanded.insert(expanded.begin() + d + 1, repeats);
  merged[static_cast<size_t>(d)] *= repeats;
  return unsqueeze(d + 1, loc).expand(expanded, loc).reshape(merged, loc);
}

// A tensor of counts: the counts decide the result's size, so they are read
// to the host (as PyTorch does without output_size), then one index_select.
Tensor Tensor::repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim_opt, SourceLoc loc) const {
  detail::impl_of(*this, "repeat_interleave", loc);
  detail::impl_of(repeats, "repeat_interleave", loc);
  LOOM_CHECK(repeats.dim() <= 1, "repeat_interleave", loc, "repeats must be 0-dim or 1-dim tensor, got ", describe(repeats));
  LOOM_CHECK(repeats.dtype() == kLong || repeats.dtype() == kInt, "repeat_interleave", loc,
             "repeats has to be an int32 or int64 tensor, got ", describe(repeats));
  if (!dim_opt) return flatten(0, -1, loc).repeat_interleave(repeats, 0, loc);
  const int64_t d = wrap_dim(*dim_opt, dim(), "repeat_interleave", loc);
  if (repeats.dim() == 0 || repeats.numel() == 1) return repeat_interleave(repeats.reshape({-1}).to(kLong).item<int64_t>(), d, loc);
  LOOM_CHECK(repeats.size(0) == size(d), "repeat_interleave", loc, "repeats must have the same size as input along dim ",
             d, ": ", describe(repeats), " for ", describe(*this));
  const std::vector<int64_t> counts = repeats.to(kLong, loc).to_vector<int64_t>();
  std::vector<int64_t> index;
  for (size_t i = 0; i < counts.size(); ++i) {
    LOOM_CHECK(counts[i] >= 0, "repeat_interleave", loc, "repeats can not be negative, got ", counts[i], " at ", i);
    index.insert(index.end(), static_cast<size_t>(counts[i]), static_cast<int64_t>(i));
  }
  return index_select(d, loom::tensor(index, TensorOptions(kLong).device(device()), loc), loc);
}

Tensor Tensor::flip(IntArrayRef dims, SourceLoc loc) const {
  detail::impl_of(*this, "flip", loc);
  Tensor out = *this;
  for (int64_t d0 : dims) {
    const int64_t d = wrap_dim(d0, dim(), "flip", loc), n = size(d);
    if (n <= 1) continue;
    out = out.index_select(d, loom::arange(n - 1, -1, -1, TensorOptions(kLong).device(device()), loc), loc);
  }
  return out;
}

Tensor Tensor::roll(IntArrayRef shifts, IntArrayRef dims, SourceLoc loc) const {
  detail::impl_of(*this, "roll", loc);
  if (dims.empty()) {
    LOOM_CHECK(shifts.size() == 1, "roll", loc, "without dims, roll takes one shift, got ", IntArrayRef(shifts));
    return flatten(0, -1, loc).roll(shifts, {0}, loc).view(sizes(), loc);
  }
  LOOM_CHECK(shifts.size() == dims.size(), "roll", loc, "shifts and dims must have the same length, got ",
             IntArrayRef(shifts), " and ", IntArrayRef(dims));
  Tensor out = *this;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "roll", loc), n = size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    out = loom::cat({out.slice(d, n - s, n, 1, loc), out.slice(d, 0, n - s, 1, loc)}, d, loc);
  }
  return out;
}

Tensor Tensor::masked_fill(const Tensor& mask, const Scalar& value, SourceLoc loc) const {
  detail::impl_of(*this, "masked_fill", loc);
  detail::impl_of(mask, "masked_fill", loc);
  LOOM_CHECK(mask.dtype() == kBool, "masked_fill", loc, "expected a Bool mask, got ", describe(mask));
  return loom::where(mask, loom::full({}, value, TensorOptions(dtype()).device(device()), loc), *this, loc);
}

Tensor Tensor::masked_fill(const Tensor& mask, const Tensor& value, SourceLoc loc) const {
  detail::impl_of(value, "masked_fill", loc);
  LOOM_CHECK(value.dim() == 0, "masked_fill", loc, "only supports a 0-dimensional value tensor, got ",
             describe(value));
  LOOM_CHECK(mask.defined() && mask.dtype() == kBool, "masked_fill", loc, "expected a Bool mask, got ",
             describe(mask));
  return loom::where(mask, value.to(dtype(), loc), *this, loc);
}

Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& value, SourceLoc loc) {
  return copy_(masked_fill(mask, value, loc), loc);
}

Tensor Tensor::isnan(SourceLoc loc) const { return ne(*this, loc); }

Tensor Tensor::isinf(SourceLoc loc) const {
  detail::impl_of(*this, "isinf", loc);
  if (!loom::is_floating_point(dtype())) return loom::zeros(sizes(), TensorOptions(kBool).device(device()), loc);
  return abs(loc).eq(std::numeric_limits<double>::infinity(), loc);
}

Tensor Tensor::isfinite(SourceLoc loc) const {
  detail::impl_of(*this, "isfinite", loc);
  if (!loom::is_floating_point(dtype())) return loom::ones(sizes(), TensorOptions(kBool).device(device()), loc);
  return loom::logical_not(loom::logical_or(isnan(loc), isinf(loc), loc), loc);
}

Tensor Tensor::clamp(const Tensor& min, const Tensor& max, SourceLoc loc) const {
  detail::impl_of(*this, "clamp", loc);
  LOOM_CHECK(min.defined() || max.defined(), "clamp", loc, "at least one of 'min' or 'max' must not be None");
  Tensor out = *this;
  if (min.defined()) out = loom::maximum(out, min, loc);
  if (max.defined()) out = loom::minimum(out, max, loc);
  return out;
}

Tensor Tensor::outer(const Tensor& other, SourceLoc loc) const {
  detail::impl_of(*this, "outer", loc), detail::impl_of(other, "outer", loc);
  LOOM_CHECK(dim() == 1 && other.dim() == 1, "outer", loc, "expects two 1-D tensors, got ", describe(*this), " and ",
             describe(other));
  return unsqueeze(1, loc).mul(other.unsqueeze(0, loc), loc);
}

Tensor Tensor::diagonal(int64_t offset, SourceLoc loc) const {
  detail::impl_of(*this, "diagonal", loc);
  LOOM_CHECK(dim() == 2, "diagonal", loc, "expects a 2-D tensor here, got ", describe(*this));
  const int64_t n = size(0), m = size(1);
  const int64_t count = std::max<int64_t>(0, offset >= 0 ? std::min(n, m - offset) : std::min(n + offset, m));
  if (count == 0) return loom::zeros({0}, TensorOptions(dtype()).device(device()), loc);
  const int64_t start = offset >= 0 ? offset : -offset * m;
  return reshape({n * m}, loc).slice(0, start, start + (count - 1) * (m + 1) + 1, m + 1, loc);
}

Tensor Tensor::diag(int64_t diagonal_offset, SourceLoc loc) const {
  detail::impl_of(*this, "diag", loc);
  LOOM_CHECK(dim() == 1 || dim() == 2, "diag", loc, "expects a 1-D or 2-D tensor, got ", describe(*this));
  if (dim() == 2) return diagonal(diagonal_offset, loc);
  const int64_t n = size(0), k = diagonal_offset < 0 ? -diagonal_offset : diagonal_offset;
  const TensorOptions o = TensorOptions(dtype()).device(device());
  Tensor square = loom::eye(n, o, loc).mul(unsqueeze(0, loc), loc);  // v on the diagonal
  if (k == 0) return square;
  // k > 0: zero columns on the left and rows at the bottom; k < 0 the other way.
  const Tensor cols = loom::zeros({n, k}, o, loc), rows = loom::zeros({k, n + k}, o, loc);
  if (diagonal_offset > 0) return loom::cat({loom::cat({cols, square}, 1, loc), rows}, 0, loc);
  return loom::cat({rows, loom::cat({square, cols}, 1, loc)}, 0, loc);
}

Tensor Tensor::baddbmm(const Tensor& batch1, const Tensor& batch2, const Scalar& beta, const Scalar& alpha,
                       SourceLoc loc) const {
  detail::impl_of(*this, "baddbmm", loc);
  Tensor product = batch1.bmm(batch2, loc).mul(alpha, loc);
  if (beta.to<double>() == 0) return product;  // PyTorch ignores self (and its NaNs) when beta is 0
  return detail::autocast::lower(*this, loc).mul(beta, loc).add(product, 1, loc);
}

// sinh from expm1 keeps its precision near 0, where exp(x) - exp(-x) cancels.
Tensor Tensor::sinh(SourceLoc loc) const {
  detail::impl_of(*this, "sinh", loc);
  if (detail::autocast::wants_float(*this)) return to(kFloat, loc).sinh(loc);
  return expm1(loc).sub(neg(loc).expm1(loc), 1, loc).mul(0.5, loc);
}
Tensor Tensor::cosh(SourceLoc loc) const {
  detail::impl_of(*this, "cosh", loc);
  if (detail::autocast::wants_float(*this)) return to(kFloat, loc).cosh(loc);
  return exp(loc).add(neg(loc).exp(loc), 1, loc).mul(0.5, loc);
}
Tensor Tensor::tan(SourceLoc loc) const {
  detail::impl_of(*this, "tan", loc);
  if (detail::autocast::wants_float(*this)) return to(kFloat, loc).tan(loc);
  return sin(loc).div(cos(loc), loc);
}

Tensor sinh(const Tensor& x, SourceLoc loc) { return x.sinh(loc); }
Tensor cosh(const Tensor& x, SourceLoc loc) { return x.cosh(loc); }
Tensor tan(const Tensor& x, SourceLoc loc) { return x.tan(loc); }
Tensor flip(const Tensor& x, IntArrayRef dims, SourceLoc loc) { return x.flip(dims, loc); }
Tensor roll(const Tensor& x, IntArrayRef shifts, IntArrayRef dims, SourceLoc loc) { return x.roll(shifts, dims, loc); }
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim, SourceLoc loc) {
  return x.repeat_interleave(repeats, dim, loc);
}
Tensor repeat_interleave(const Tensor& repeats, SourceLoc loc) {
  detail::impl_of(repeats, "repeat_interleave", loc);
  LOOM_CHECK(repeats.dim() == 1, "repeat_interleave", loc, "repeats must be 1-dim, got ", describe(repeats));
  return arange(repeats.size(0), TensorOptions(kLong).device(repeats.device()), loc).repeat_interleave(repeats, 0, loc);
}
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim, SourceLoc loc) {
  return x.repeat_interleave(repeats, dim, loc);
}
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value, SourceLoc loc) {
  return x.masked_fill(mask, value, loc);
}
Tensor isnan(const Tensor& x, SourceLoc loc) { return x.isnan(loc); }
Tensor isinf(const Tensor& x, SourceLoc loc) { return x.isinf(loc); }
Tensor isfinite(const Tensor& x, SourceLoc loc) { return x.isfinite(loc); }
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max, SourceLoc loc) {
  return x.clamp(min, max, loc);
}
Tensor outer(const Tensor& a, const Tensor& b, SourceLoc loc) { return a.outer(b, loc); }
Tensor diag(const Tensor& x, int64_t diagonal, SourceLoc loc) { return x.diag(diagonal, loc); }
Tensor baddbmm(const Tensor& self, const Tensor& batch1, const Tensor& batch2, const Scalar& beta, const Scalar& alpha,
               SourceLoc loc) {
  return self.baddbmm(batch1, batch2, beta, alpha, loc);
}

}  // namespace loom
