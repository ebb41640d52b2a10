// Sorting: sort, argsort, topk, kthvalue and msort. One ArgSort node gives
// the positions of a stable sort along a dim (NaN greater than every
// number); every value is gathered by them (Gather), so the values'
// gradient is gather's. topk and kthvalue narrow the sorted positions
// first; topk's unsorted order is the sorted one, which PyTorch allows.
#include <loom/functions.h>

#include "api/src/record.h"

namespace loom {

using detail::describe;
using detail::impl_of;
using detail::wrap_dim;

namespace {

// The positions of a stable sort of x along d (wrapped); a 0-d x is one element.
Tensor sorted_positions(const Tensor& x, int64_t d, bool descending, const SourceLoc& loc) {
  if (x.dim() == 0) return sorted_positions(x.reshape({1}, loc), 0, descending, loc).reshape({}, loc);
  auto n = detail::new_node(ir::Op::ArgSort, kLong, x.device(), detail::shape_of(x), {detail::read(x, loc)}, loc);
  n->attr.push_back(d);
  n->attr.push_back(descending ? 1 : 0);
  return detail::wrap(std::move(n));
}

// The values at `positions` along d; a 0-d x reads its one element.
Tensor values_at(const Tensor& x, int64_t d, const Tensor& positions, const SourceLoc& loc) {
  if (x.dim() == 0) return gather(x.reshape({1}, loc), 0, positions.reshape({1}, loc), loc).reshape({}, loc);
  return gather(x, d, positions, loc);
}

int64_t size_along(const Tensor& x, int64_t d) { return x.dim() == 0 ? 1 : x.size(d); }

void check_not_bool(const Tensor& x, const char* op, const SourceLoc& loc) {
  LOOM_CHECK(x.dtype() != kBool, op, loc, "\"", op, "\" not implemented for 'Bool' (", describe(x), ")");
}

}  // namespace

Tensor argsort(const Tensor& x, int64_t dim, bool descending, SourceLoc loc) {
  impl_of(x, "argsort", loc);
  return sorted_positions(x, wrap_dim(dim, x.dim(), "argsort", loc), descending, loc);
}
Tensor Tensor::argsort(int64_t dim, bool descending, SourceLoc loc) const {
  return loom::argsort(*this, dim, descending, loc);
}

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, SourceLoc loc) {
  impl_of(x, "sort", loc);
  const int64_t d = wrap_dim(dim, x.dim(), "sort", loc);
  Tensor positions = sorted_positions(x, d, descending, loc);
  return {values_at(x, d, positions, loc), positions};
}
// Every sort here is stable; stable = false allows any order of ties, so
// the stable one is as good.
std::tuple<Tensor, Tensor> sort(const Tensor& x, std::optional<bool> stable, int64_t dim, bool descending,
                                SourceLoc loc) {
  (void)stable;
  return sort(x, dim, descending, loc);
}
std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending, SourceLoc loc) const {
  return loom::sort(*this, dim, descending, loc);
}
std::tuple<Tensor, Tensor> Tensor::sort(std::optional<bool> stable, int64_t dim, bool descending, SourceLoc loc) const {
  return loom::sort(*this, stable, dim, descending, loc);
}

Tensor msort(const Tensor& x, SourceLoc loc) { return std::get<0>(sort(x, 0, false, loc)); }
Tensor Tensor::msort(SourceLoc loc) const { return loom::msort(*this, loc); }

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted, SourceLoc loc) {
  (void)sorted;
  impl_of(x, "topk", loc);
  check_not_bool(x, "topk", loc);
  const int64_t d = wrap_dim(dim, x.dim(), "topk", loc);
  LOOM_CHECK(k >= 0 && k <= size_along(x, d), "topk", loc, "selected index k out of range: k = ", k, " along dim ", d,
             " of ", describe(x));
  // A 0-d x: its one element (k = 1), or none as a 1-D empty pair (k = 0).
  if (x.dim() == 0 && k == 0) return topk(x.reshape({1}, loc), 0, 0, largest, sorted, loc);
  Tensor positions = sorted_positions(x, d, largest, loc);
  if (x.dim() > 0) positions = positions.narrow(d, 0, k, loc);
  return {values_at(x, d, positions, loc), positions};
}
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted, SourceLoc loc) const {
  return loom::topk(*this, k, dim, largest, sorted, loc);
}

std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim, SourceLoc loc) {
  impl_of(x, "kthvalue", loc);
  check_not_bool(x, "kthvalue", loc);
  const int64_t d = wrap_dim(dim, x.dim(), "kthvalue", loc);
  LOOM_CHECK(k >= 1 && k <= size_along(x, d), "kthvalue", loc, "selected number k out of range: k = ", k,
             " along dim ", d, " of ", describe(x));
  if (x.dim() == 0) return {x * 1, sorted_positions(x, 0, false, loc)};
  Tensor positions = sorted_positions(x, d, false, loc).narrow(d, k - 1, 1, loc);
  Tensor values = gather(x, d, positions, loc);
  if (keepdim) return {values, positions};
  return {values.squeeze(d, loc), positions.squeeze(d, loc)};
}
std::tuple<Tensor, Tensor> Tensor::kthvalue(int64_t k, int64_t dim, bool keepdim, SourceLoc loc) const {
  return loom::kthvalue(*this, k, dim, keepdim, loc);
}

}  // namespace loom
