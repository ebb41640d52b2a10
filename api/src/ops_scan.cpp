// Scans along a dim: cumsum and cumprod (one Scan node each, with their
// own gradient rules, api/src/autograd/rules_scan.cpp), cummax and cummin
// (a Scan node of the running extreme's positions, whose values are a
// gather, with gather's gradient), and logcumsumexp (a composite).
#include <loom/functions.h>

#include <limits>

#include "api/src/autograd/hooks.h"
#include "api/src/autocast.h"
#include "api/src/record.h"

namespace loom {

using detail::describe;
using detail::impl_of;
using detail::wrap_dim;

namespace {

// A Scan of x along d (wrapped) into `dt`; a 0-d x is a row of one.
Tensor scan_node(ir::ScanKind kind, const Tensor& x, int64_t d, ScalarType dt, const SourceLoc& loc) {
  if (x.dim() == 0) return scan_node(kind, x.reshape({1}, loc), 0, dt, loc).reshape({}, loc);
  auto n = detail::new_node(ir::Op::Scan, dt, x.device(), detail::shape_of(x), {detail::read(x, loc)}, loc);
  n->attr.push_back(d);
  n->attr.push_back(static_cast<int64_t>(kind));
  Tensor out = detail::wrap(std::move(n));
  const bool arithmetic = kind == ir::ScanKind::Sum || kind == ir::ScanKind::Prod;
  if (arithmetic && detail::needs_grad(x)) [[unlikely]] detail::grad::scan(kind, x, d, out, loc);
  return out;
}

// cumsum / cumprod: x cast to dtype first; integers and bool in int64 by default.
Tensor accumulate(ir::ScanKind kind, const char* name, const Tensor& x, int64_t dim, std::optional<ScalarType> dtype,
                  const SourceLoc& loc) {
  impl_of(x, name, loc);
  const int64_t d = wrap_dim(dim, x.dim(), name, loc);
  const ScalarType dt = dtype.value_or(is_floating_point(x.dtype()) ? x.dtype() : kLong);
  return scan_node(kind, x.dtype() == dt ? x : x.to(dt, loc), d, dt, loc);
}

std::tuple<Tensor, Tensor> running_extreme(ir::ScanKind kind, const char* name, const Tensor& x, int64_t dim,
                                           const SourceLoc& loc) {
  impl_of(x, name, loc);
  const int64_t d = wrap_dim(dim, x.dim(), name, loc);
  Tensor positions = scan_node(kind, x, d, kLong, loc);
  if (x.dim() == 0)
    return {gather(x.reshape({1}, loc), 0, positions.reshape({1}, loc), loc).reshape({}, loc), positions};
  return {gather(x, d, positions, loc), positions};
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype, SourceLoc loc) {
  if (!dtype && detail::autocast::wants_float(x)) return cumsum(x.to(kFloat, loc), dim, dtype, loc);
  return accumulate(ir::ScanKind::Sum, "cumsum", x, dim, dtype, loc);
}
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype, SourceLoc loc) {
  if (!dtype && detail::autocast::wants_float(x)) return cumprod(x.to(kFloat, loc), dim, dtype, loc);
  return accumulate(ir::ScanKind::Prod, "cumprod", x, dim, dtype, loc);
}
Tensor Tensor::cumsum(int64_t dim, std::optional<ScalarType> dtype, SourceLoc loc) const {
  return loom::cumsum(*this, dim, dtype, loc);
}
Tensor Tensor::cumprod(int64_t dim, std::optional<ScalarType> dtype, SourceLoc loc) const {
  return loom::cumprod(*this, dim, dtype, loc);
}

std::tuple<Tensor, Tensor> cummax(const Tensor& x, int64_t dim, SourceLoc loc) {
  return running_extreme(ir::ScanKind::ArgMax, "cummax", x, dim, loc);
}
std::tuple<Tensor, Tensor> cummin(const Tensor& x, int64_t dim, SourceLoc loc) {
  return running_extreme(ir::ScanKind::ArgMin, "cummin", x, dim, loc);
}
std::tuple<Tensor, Tensor> Tensor::cummax(int64_t dim, SourceLoc loc) const { return loom::cummax(*this, dim, loc); }
std::tuple<Tensor, Tensor> Tensor::cummin(int64_t dim, SourceLoc loc) const { return loom::cummin(*this, dim, loc); }

// out[k] = logsumexp(x[0..k]): a logsumexp over a masked square of each
// row, so every prefix is shifted by its own maximum (no underflow of the
// early terms against a later maximum) and the gradient is logsumexp's.
// It costs len^2 per row along dim: meant for the short rows it is used on.
Tensor logcumsumexp(const Tensor& x, int64_t dim, SourceLoc loc) {
  impl_of(x, "logcumsumexp", loc);
  LOOM_CHECK(is_floating_point(x.dtype()), "logcumsumexp", loc, "\"logcumsumexp\" not implemented for '",
             x.dtype(), "' (", describe(x), ")");
  const int64_t d = wrap_dim(dim, x.dim(), "logcumsumexp", loc);
  if (x.dim() == 0 || x.numel() == 0) return x.clone(loc);
  const int64_t len = x.size(d);
  Tensor rows = x.transpose(d, -1, loc);  // [..., len]
  std::vector<int64_t> square = rows.sizes().vec();
  square.insert(square.end() - 1, len);   // [..., len (k), len (j)]
  const Tensor j = arange(len, TensorOptions(kLong).device(x.device()), loc);
  const Tensor prefix = ge(j.unsqueeze(1, loc), j, loc);  // [k][j]: j <= k
  Tensor masked = where(prefix, rows.unsqueeze(-2, loc).expand(square, loc),
                        -std::numeric_limits<double>::infinity(), loc);
  return masked.logsumexp({-1}, false, loc).transpose(d, -1, loc);
}
Tensor Tensor::logcumsumexp(int64_t dim, SourceLoc loc) const { return loom::logcumsumexp(*this, dim, loc); }

}  // namespace loom
