// Tensor's in-place initializers (uniform_, normal_, bernoulli_, random_)
// and in-place comparisons (eq_, ...), and accessor()'s checks. Each computes its values as an
// ordinary op and copies them in with copy_, which writes through views and
// follows libtorch's rules for in-place writes under autograd.
#include <loom/functions.h>
#include <loom/tensor.h>

#include "api/src/record.h"

namespace loom {

namespace {
TensorOptions like(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }

void check_floating(const Tensor& t, const char* op, const SourceLoc& loc) {
  detail::impl_of(t, op, loc);
  LOOM_CHECK(is_floating_point(t.dtype()), op, loc, op, " expects a floating-point tensor, got ", t.dtype());
}
}  // namespace

Tensor& Tensor::uniform_(double from, double to, SourceLoc loc) {
  check_floating(*this, "uniform_", loc);
  LOOM_CHECK(from <= to, "uniform_", loc, "expects from <= to, but got from=", from, " > to=", to);
  return copy_(rand(sizes(), like(*this), loc).mul(to - from, loc).add(from, 1, loc), loc);
}

Tensor& Tensor::normal_(double mean, double std, SourceLoc loc) {
  check_floating(*this, "normal_", loc);
  LOOM_CHECK(std >= 0, "normal_", loc, "expects std >= 0.0, but found std ", std);
  return copy_(randn(sizes(), like(*this), loc).mul(std, loc).add(mean, 1, loc), loc);
}

Tensor& Tensor::bernoulli_(double p, SourceLoc loc) {
  detail::impl_of(*this, "bernoulli_", loc);
  LOOM_CHECK(p >= 0 && p <= 1, "bernoulli_", loc, "expects 0 <= p <= 1, but got p=", p);
  return copy_(rand(sizes(), TensorOptions(kDouble).device(device()), loc).lt(p, loc).to(dtype(), loc), loc);
}

Tensor& Tensor::random_(int64_t from, int64_t to, SourceLoc loc) {
  detail::impl_of(*this, "random_", loc);
  return copy_(randint(from, to, sizes(), like(*this), loc), loc);
}

#define LOOM_INPLACE_COMPARE(name)                                                   \
  Tensor& Tensor::name##_(const Tensor& other, SourceLoc loc) {                     \
    return copy_(name(other, loc).to(dtype(), loc), loc);                            \
  }                                                                                  \
  Tensor& Tensor::name##_(const Scalar& other, SourceLoc loc) {                     \
    return copy_(name(other, loc).to(dtype(), loc), loc);                            \
  }
LOOM_INPLACE_COMPARE(eq)
LOOM_INPLACE_COMPARE(ne)
LOOM_INPLACE_COMPARE(lt)
LOOM_INPLACE_COMPARE(le)
LOOM_INPLACE_COMPARE(gt)
LOOM_INPLACE_COMPARE(ge)
#undef LOOM_INPLACE_COMPARE

}  // namespace loom

namespace loom {

void Tensor::check_accessor(size_t dims, SourceLoc loc) const {
  detail::impl_of(*this, "accessor", loc);
  LOOM_CHECK(static_cast<size_t>(dim()) == dims, "accessor", loc, "expected ", dims, " dims but tensor has ", dim());
  LOOM_CHECK(!device().is_cuda(), "accessor", loc, "accessor() is for CPU tensors; this one is on ", device().str());
}

}  // namespace loom
