// Ops whose result size depends on the data: nonzero, argwhere,
// where(cond), masked_select, masked_scatter, _unique, _unique2, unique_dim,
// unique_consecutive. As PyTorch's CUDA ops do, each reads what decides the
// size to the host (a materialization point), finds the positions there,
// and then records ordinary ops (index_select, scatter) on the input's
// device, so values keep their gradient where PyTorch gives one.
#include <loom/functions.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "api/src/record.h"

namespace loom {

using detail::describe;
using detail::impl_of;

namespace {

Tensor longs_on(const std::vector<int64_t>& v, std::vector<int64_t> shape, Device dev, const SourceLoc& loc) {
  return tensor(v, TensorOptions(kLong).device(dev), loc).reshape(shape, loc);
}

// The flat (row-major) positions where x is nonzero.
std::vector<int64_t> true_positions(const Tensor& x, const SourceLoc& loc) {
  const std::vector<bool> m = (x.dtype() == kBool ? x : x.ne(0, loc)).to_vector<bool>(loc);
  std::vector<int64_t> pos;
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i]) pos.push_back(static_cast<int64_t>(i));
  return pos;
}

ir::Dims broadcast(const Tensor& a, const Tensor& b, const char* op, const SourceLoc& loc) {
  return detail::broadcast_shapes(detail::shape_of(a), detail::shape_of(b), op, loc);
}

// Calls f with x's values on the host: int64 exactly, every other dtype as
// double (exact for each of them).
template <class F>
auto with_values(const Tensor& x, const SourceLoc& loc, F&& f) {
  if (x.dtype() == kLong) return f(x.to_vector<int64_t>(loc));
  return f(x.to_vector<double>(loc));
}

// NaN sorts last, and no NaN equals another (PyTorch's sorted unique keeps
// each NaN apart).
template <class T>
bool before(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

// Unique rows of values viewed as [n, row] (row 1: elements), in sorted
// order or (consecutive) runs. Returns each group's first row, the group of
// every row and each group's size.
struct Groups {
  std::vector<int64_t> first, inverse, counts;
};
template <class T>
Groups group_rows(const std::vector<T>& v, int64_t n, int64_t row, bool consecutive) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  auto at = [&](int64_t r, int64_t k) { return v[static_cast<size_t>(r * row + k)]; };
  if (!consecutive)
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      for (int64_t k = 0; k < row; ++k) {
        if (before(at(a, k), at(b, k))) return true;
        if (before(at(b, k), at(a, k))) return false;
      }
      return false;
    });
  auto same = [&](int64_t a, int64_t b) {
    for (int64_t k = 0; k < row; ++k)
      if (!(at(a, k) == at(b, k))) return false;
    return true;
  };
  Groups g;
  g.inverse.assign(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = order[static_cast<size_t>(i)];
    if (g.first.empty() || !same(g.first.back(), r)) {
      g.first.push_back(r);
      g.counts.push_back(0);
    }
    g.inverse[static_cast<size_t>(r)] = static_cast<int64_t>(g.first.size()) - 1;
    ++g.counts.back();
  }
  return g;
}

std::tuple<Tensor, Tensor, Tensor> unique_impl(const Tensor& x, std::optional<int64_t> dim, bool consecutive,
                                               bool return_inverse, bool return_counts, const char* op,
                                               const SourceLoc& loc) {
  impl_of(x, op, loc);
  const Device dev = x.device();
  Tensor rows;  // [n, row]: the slices along dim, or the elements
  int64_t d = 0;
  if (dim) {
    d = detail::wrap_dim(*dim, x.dim(), op, loc);
    LOOM_CHECK(x.dim() > 0, op, loc, "a 0-dimensional tensor has no dim to take unique slices along");
    std::vector<int64_t> perm{d};
    for (int64_t k = 0; k < x.dim(); ++k)
      if (k != d) perm.push_back(k);
    rows = x.permute(perm, loc).reshape({x.size(d), -1}, loc);
  } else {
    rows = x.reshape({-1, 1}, loc);
  }
  const int64_t n = rows.size(0), row = rows.size(1);
  const Groups g = with_values(rows, loc, [&](const auto& v) { return group_rows(v, n, row, consecutive); });
  const int64_t k = static_cast<int64_t>(g.first.size());
  Tensor first = longs_on(g.first, {k}, dev, loc);
  Tensor values = dim ? x.index_select(d, first, loc) : x.reshape({-1}, loc).index_select(0, first, loc);
  const std::vector<int64_t> inverse_shape = dim ? std::vector<int64_t>{n} : x.sizes().vec();
  Tensor inverse = return_inverse ? longs_on(g.inverse, inverse_shape, dev, loc) : zeros({0}, TensorOptions(kLong).device(dev), loc);
  Tensor counts = return_counts ? longs_on(g.counts, {k}, dev, loc) : zeros({0}, TensorOptions(kLong).device(dev), loc);
  return {values.detach(), inverse, counts};
}

}  // namespace

Tensor nonzero(const Tensor& x, SourceLoc loc) {
  impl_of(x, "nonzero", loc);
  const std::vector<int64_t> flat = true_positions(x, loc);
  const int64_t nd = x.dim(), n = static_cast<int64_t>(flat.size());
  std::vector<int64_t> coords(static_cast<size_t>(n * nd));
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = flat[static_cast<size_t>(i)];
    for (int64_t k = nd - 1; k >= 0; --k) {
      coords[static_cast<size_t>(i * nd + k)] = rest % x.size(k);
      rest /= x.size(k);
    }
  }
  return longs_on(coords, {n, nd}, x.device(), loc);
}
Tensor argwhere(const Tensor& x, SourceLoc loc) { return nonzero(x, loc); }
std::vector<Tensor> nonzero_numpy(const Tensor& x, SourceLoc loc) {
  impl_of(x, "nonzero_numpy", loc);
  if (x.dim() == 0) return nonzero(x.unsqueeze(0, loc), loc).unbind(1, loc);
  return nonzero(x, loc).unbind(1, loc);
}
std::vector<Tensor> where(const Tensor& condition, SourceLoc loc) { return nonzero_numpy(condition, loc); }
Tensor Tensor::nonzero(SourceLoc loc) const { return loom::nonzero(*this, loc); }
Tensor Tensor::argwhere(SourceLoc loc) const { return loom::nonzero(*this, loc); }
std::vector<Tensor> Tensor::nonzero_numpy(SourceLoc loc) const { return loom::nonzero_numpy(*this, loc); }

Tensor masked_select(const Tensor& x, const Tensor& mask, SourceLoc loc) {
  impl_of(x, "masked_select", loc);
  impl_of(mask, "masked_select", loc);
  detail::check_same_device(x, mask, "masked_select", loc);
  LOOM_CHECK(mask.dtype() == kBool, "masked_select", loc, "expected a Bool mask, got ", describe(mask));
  const ir::Dims shape = broadcast(x, mask, "masked_select", loc);
  const IntArrayRef sizes = detail::to_ref(shape);
  const std::vector<int64_t> pos = true_positions(mask.expand(sizes, loc), loc);
  Tensor flat = x.expand(sizes, loc).reshape({-1}, loc);
  return flat.index_select(0, longs_on(pos, {static_cast<int64_t>(pos.size())}, x.device(), loc), loc);
}
Tensor Tensor::masked_select(const Tensor& mask, SourceLoc loc) const { return loom::masked_select(*this, mask, loc); }

Tensor masked_scatter(const Tensor& x, const Tensor& mask, const Tensor& source, SourceLoc loc) {
  const char* op = "masked_scatter";
  impl_of(x, op, loc);
  impl_of(mask, op, loc);
  impl_of(source, op, loc);
  detail::check_same_device(x, mask, op, loc);
  detail::check_same_device(x, source, op, loc);
  LOOM_CHECK(mask.dtype() == kBool, op, loc, "expected a Bool mask, got ", describe(mask));
  LOOM_CHECK(source.dtype() == x.dtype(), op, loc, "expected self and source to have same dtypes but got ",
             describe(x), " and ", describe(source));
  const ir::Dims shape = broadcast(x, mask, op, loc);
  const IntArrayRef sizes = detail::to_ref(shape);
  const std::vector<int64_t> pos = true_positions(mask.expand(sizes, loc), loc);
  const int64_t k = static_cast<int64_t>(pos.size());
  LOOM_CHECK(source.numel() >= k, op, loc, "Number of elements of source < number of ones in mask (",
             source.numel(), " < ", k, ")");
  Tensor taken = source.reshape({-1}, loc).narrow(0, 0, k, loc);
  return x.expand(sizes, loc).reshape({-1}, loc).scatter(0, longs_on(pos, {k}, x.device(), loc), taken, loc).view(sizes, loc);
}
Tensor Tensor::masked_scatter(const Tensor& mask, const Tensor& source, SourceLoc loc) const {
  return loom::masked_scatter(*this, mask, source, loc);
}
Tensor& Tensor::masked_scatter_(const Tensor& mask, const Tensor& source, SourceLoc loc) {
  return copy_(loom::masked_scatter(*this, mask, source, loc), loc);
}

std::tuple<Tensor, Tensor> _unique(const Tensor& x, bool sorted, bool return_inverse, SourceLoc loc) {
  auto [values, inverse, counts] = unique_impl(x, std::nullopt, false, return_inverse, false, "_unique", loc);
  return {values, inverse};
}
std::tuple<Tensor, Tensor, Tensor> _unique2(const Tensor& x, bool sorted, bool return_inverse, bool return_counts,
                                            SourceLoc loc) {
  return unique_impl(x, std::nullopt, false, return_inverse, return_counts, "_unique2", loc);
}
std::tuple<Tensor, Tensor, Tensor> unique_dim(const Tensor& x, int64_t dim, bool sorted, bool return_inverse,
                                              bool return_counts, SourceLoc loc) {
  return unique_impl(x, dim, false, return_inverse, return_counts, "unique_dim", loc);
}
std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& x, bool return_inverse, bool return_counts,
                                                      std::optional<int64_t> dim, SourceLoc loc) {
  return unique_impl(x, dim, true, return_inverse, return_counts, "unique_consecutive", loc);
}

}  // namespace loom
